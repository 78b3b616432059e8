# Connects to a server the way puppet agent 7 does: Puppet::SSL::SSLProvider
# builds the SSL context (verifying the agent's own certificate against the
# CA and CRLs, certificate_revocation = chain), Puppet::HTTP::Factory's TLS
# settings (min_version, Puppet's default ciphers) are applied, and
# Puppet::SSL::Verifier checks the server's chain, CRL and name during the
# handshake. It connects twice: with the default protocol (TLS 1.3) and
# capped at TLS 1.2, where Puppet's cipher list decides.
# Usage: ruby puppet_connect.rb CA_PEM CRL_PEM KEY_PEM CERT_PEM SERVERNAME PORT
# Prints PEER_KEY/TLS/BODY lines per connection, or ERROR <class>: <message>
# and exits 3.
require 'puppet'
require 'net/http'

ca_path, crl_path, key_path, cert_path, server, port = ARGV
begin
  ctx = Puppet::SSL::SSLProvider.new.create_context(
    cacerts: [OpenSSL::X509::Certificate.new(File.read(ca_path))],
    crls: [OpenSSL::X509::CRL.new(File.read(crl_path))],
    private_key: OpenSSL::PKey.read(File.read(key_path)),
    client_cert: OpenSSL::X509::Certificate.new(File.read(cert_path)),
    revocation: :chain,
  )
  [nil, OpenSSL::SSL::TLS1_2_VERSION].each do |max|
    verifier = Puppet::SSL::Verifier.new(server, ctx)
    http = Net::HTTP.new(server, port.to_i)
    http.ipaddr = '127.0.0.1'
    http.use_ssl = true
    http.open_timeout = 10
    http.read_timeout = 10
    http.min_version = OpenSSL::SSL::TLS1_VERSION           # as Puppet::HTTP::Factory
    http.ciphers = Puppet.settings.setting(:ciphers).default # Puppet[:ciphers]
    http.max_version = max if max
    verifier.setup_connection(http)
    begin
      http.start
    rescue OpenSSL::SSL::SSLError => e
      verifier.handle_connection_error(http, e)
    end
    resp = http.get('/whoami')
    key = http.peer_cert.public_key
    curve = key.respond_to?(:group) ? key.group.curve_name : ''
    sock = http.instance_variable_get(:@socket).io
    puts "PEER_KEY #{key.class} #{curve}"
    puts "TLS #{sock.ssl_version} #{sock.cipher[0]}"
    puts "BODY #{resp.body}"
    http.finish
  end
rescue StandardError => e
  puts "ERROR #{e.class}: #{e.message}"
  exit 3
end
