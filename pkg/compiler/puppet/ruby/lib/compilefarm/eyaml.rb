# frozen_string_literal: true
#
# Encrypted Hiera data (hiera-eyaml).
#
# Puppet's own eyaml_lookup_key backend decrypts ENC[PKCS7,...] values with
# the key pair its hierarchy level names (options pkcs7_private_key and
# pkcs7_public_key; without them, hiera-eyaml has no key at all). Keys are
# never part of a code snapshot: they live in the directory --eyaml-keys=DIR
# names, and each key path is resolved when a value is decrypted (at
# Pkcs7.decrypt, once the function has set the level's options):
#   - a level that names no key gets DIR/private_key.pkcs7.pem and
#     DIR/public_key.pkcs7.pem (hiera-eyaml's file names);
#   - an absolute path that exists on this host is used as written, as
#     Puppet Server would;
#   - any other path (the /etc/puppetlabs/puppet/eyaml/... of a control repo
#     written for Puppet Server) is looked up by its file name in DIR.
# A key that the level reads from a set environment variable
# (pkcs7_private_key_env_var) is left to hiera-eyaml. A key that cannot be
# found, read or parsed, or that is not the one a value was encrypted for,
# fails the compile with an error naming the key file and the setting.
# Decrypting reads no fact.

module CompileFarm
  module Eyaml
    # Where an operator sets DIR, for error messages.
    SETTING = 'the eyaml keys directory (broker dev --eyaml-keys DIR; COMPILEFARM_EYAML_KEYS in the compile function)'
    # hiera-eyaml's file names for a PKCS7 key pair, by role.
    FILES = { 'private' => 'private_key.pkcs7.pem', 'public' => 'public_key.pkcs7.pem' }.freeze

    # Error is a key that cannot be used; its message says what to fix.
    class Error < StandardError; end

    class << self
      # install loads hiera-eyaml and hooks its PKCS7 decryption; dir is
      # DIR, or nil. Without hiera-eyaml, eyaml levels fail as in Puppet
      # Server, unless dir is set: then the worker cannot start.
      def install(dir)
        @dir = dir.nil? || dir.empty? ? nil : File.expand_path(dir)
        begin
          require 'hiera/backend/eyaml/parser/parser'
          require 'hiera/backend/eyaml/encryptors/pkcs7'
        rescue LoadError => e
          return unless @dir

          raise LoadError, "an eyaml keys directory is set (#{@dir}) but hiera-eyaml cannot be loaded (#{e.message}): " \
                           'install it (Debian: apt-get install hiera-eyaml; elsewhere: gem install hiera-eyaml -v 3.3.0)'
        end
        Hiera::Backend::Eyaml::Encryptors::Pkcs7.singleton_class.prepend(DecryptHook)
      end

      # decrypt resolves the level's keys, checks that the private key opens
      # ciphertext, and runs hiera-eyaml's decryption (the block).
      def decrypt(ciphertext)
        where = FILES.keys.to_h { |role| [role, resolve(role)] }
        begin
          opened = opens?(ciphertext)
          plain = yield if opened
        rescue SystemCallError => e
          raise Error, "cannot read an eyaml key (#{e.message}): make it readable by the compile worker (uid #{Process.euid}); " \
                       "keys are found through #{SETTING}"
        rescue OpenSSL::PKey::PKeyError => e
          raise Error, "eyaml private key #{where['private']} is not a PEM RSA private key without a passphrase (#{e.message}): " \
                       "put the private key of the pair (eyaml createkeys) where #{SETTING} finds it"
        rescue OpenSSL::X509::CertificateError => e
          raise Error, "eyaml public key #{where['public']} is not a PEM certificate (#{e.message}): " \
                       "put the public key of the pair (eyaml createkeys) where #{SETTING} finds it"
        rescue OpenSSL::PKCS7::PKCS7Error => e
          raise Error, wrong_key(where, "OpenSSL: #{e.message}")
        end
        raise Error, wrong_key(where, 'it does not open the session key') unless opened

        plain
      end

      # resolve points the level's option for the role's key at the file to
      # use and returns where the key comes from.
      def resolve(role)
        opts = Hiera::Backend::Eyaml::Options
        var = opts[:"pkcs7_#{role}_key_env_var"]
        return "from environment variable #{var}" if var && ENV[var.to_s]

        named = opts[:"pkcs7_#{role}_key"].to_s
        return named if named.start_with?('/') && File.exist?(named)

        file = named.empty? ? FILES[role] : File.basename(named)
        why = named.empty? ? "the hierarchy level names no pkcs7_#{role}_key" : "pkcs7_#{role}_key #{named} does not exist on the compile host"
        raise Error, "#{why}, and no eyaml keys directory is set to find #{file} in: set #{SETTING}" unless @dir

        path = File.join(@dir, file)
        unless File.file?(path)
          raise Error, "eyaml #{role} key #{path} does not exist (#{why}): put #{file} there, or set #{SETTING} to the directory that holds it"
        end

        opts[:"pkcs7_#{role}_key"] = path
        path
      end

      # opens? tells whether the private key decrypts the session key of
      # one of the value's recipients. Without this check a wrong key would
      # fail only 255 times in 256: PKCS#7 then goes on with a random
      # session key (OpenSSL's defence against timing attacks), whose
      # padding check the garbage passes by chance.
      def opens?(ciphertext)
        opts = Hiera::Backend::Eyaml::Options
        var = opts[:pkcs7_private_key_env_var]
        pem = var && ENV[var.to_s] ? ENV[var.to_s] : File.read(opts[:pkcs7_private_key].to_s)
        key = OpenSSL::PKey::RSA.new(pem, '') # '': never prompt for a passphrase
        OpenSSL::PKCS7.new(ciphertext).recipients.any? do |ri|
          key.private_decrypt(ri.enc_key)
          true
        rescue OpenSSL::PKey::PKeyError
          false
        end
      end

      def wrong_key(where, detail)
        "eyaml private key #{where['private']} cannot decrypt this value (#{detail}): it was encrypted for another key pair, or is damaged: " \
          "put the matching key pair where #{SETTING} finds it, or encrypt the value again with public key #{where['public']}"
      end
    end

    # DecryptHook is prepended to Pkcs7's singleton class.
    module DecryptHook
      def decrypt(ciphertext)
        CompileFarm::Eyaml.decrypt(ciphertext) { super }
      end
    end
  end
end
