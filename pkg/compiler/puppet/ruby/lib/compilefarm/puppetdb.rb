# frozen_string_literal: true
#
# PuppetDB in compiles: puppetdb_query() and, with storeconfigs puppetdb,
# exported collectors, through Debian's puppet-terminus-puppetdb (the
# puppetdb_query function, Puppet::Util::Puppetdb and its Http, the
# Puppet::Resource::Puppetdb terminus) loaded as Puppet Server loads it and
# configured as Puppet Server configures it: puppetdb.conf in the worker's
# confdir (written by the Go side: server_urls, server_url_timeout,
# soft_write_failure false), and Puppet's SSL settings (certname, hostcert,
# hostprivkey, localcacert) naming the farm's client certificate, so that
# requests present it and check PuppetDB's certificate against the CA.
# Two things differ from Puppet Server, both outside the termini's code:
# puppetdb.conf may name a plain http:// URL (the Go side allows one only on
# loopback), and a worker started without PuppetDB answers puppetdb_query()
# with an error that says so, instead of trying https://puppetdb:8081.
#
# Recording: every query a compile makes (puppetdb_query's, or the
# terminus's resources query, as the root query ["from", "resources",
# QUERY]) is recorded with PuppetDB's answer, exactly as it came (the Go
# side digests its canonical JSON), once per distinct query. Requests that
# fail are no records: they fail the compile. A query PuppetDB refuses
# (4xx: a PQL syntax error) fails it with PuppetDB's message; one no
# PuppetDB answered (unreachable, timed out, 5xx) raises Unavailable, which
# the worker reports as "unavailable", retried like an engine failure.

require 'cgi'

module CompileFarm
  module PuppetDB
    # Unavailable: no PuppetDB of server_urls answered the query.
    class Unavailable < Puppet::Error; end

    class << self
      # install configures PuppetDB for the worker: conf is nil (no
      # PuppetDB) or {certname: NAME or nil, storeconfigs: 'farm' or
      # 'puppetdb'}.
      def install(conf, ssl_dir)
        require 'puppet/util/puppetdb'
        if conf.nil?
          Puppet::Util::Puppetdb.singleton_class.prepend(Missing)
          return
        end

        Puppet::Util::Puppetdb::Config.singleton_class.prepend(PlainHTTP)
        certname = conf[:certname]
        if certname
          Puppet[:certname] = certname
          Puppet[:hostcert] = File.join(ssl_dir, 'cert.pem')
          Puppet[:hostprivkey] = File.join(ssl_dir, 'key.pem')
          Puppet[:localcacert] = File.join(ssl_dir, 'ca.pem')
          # The farm gives no CRL; PuppetDB's certificate is checked
          # against the CA only.
          Puppet[:certificate_revocation] = false
          # No TLS connection is reused: on a kept-alive connection, Ruby's
          # Net::HTTP waits for the TLS 1.3 session ticket that Jetty (Java)
          # sends after a response as if it were the next one, until
          # server_url_timeout.
          Puppet[:http_keepalive_timeout] = 0
          ctx = Puppet::SSL::SSLProvider.new.load_context(certname: certname, revocation: false)
          Puppet.push_context({ ssl_context: ctx }, 'compilefarm PuppetDB client certificate')
        end
        Puppet::Util::Puppetdb.config # reads puppetdb.conf now: a bad one fails the start
        Puppet::Util::Puppetdb.singleton_class.prepend(QueryHook)
        Puppet::Util::Puppetdb::Http.singleton_class.prepend(HttpHook)
        return unless conf[:storeconfigs] == 'puppetdb'

        require 'puppet/indirector/resource/puppetdb'
        Puppet::Resource::Puppetdb.prepend(TerminusHook)
      end

      # unavailable? tells whether err (or what caused it) is Unavailable.
      def unavailable?(err)
        seen = 0
        while err && seen < 20
          return true if err.is_a?(Unavailable)

          err = err.respond_to?(:original) && err.original ? err.original : err.cause
          seen += 1
        end
        false
      end
    end

    # Recorder holds one compile's queries: [query, body] by the query's JSON.
    class Recorder
      def initialize
        @queries = {}
      end

      def add(query, body)
        return if body.nil?

        key = JSON.generate(query)
        @queries[key] ||= [key, body]
      end

      # to_json_list renders the records for the response line: each
      # {"query": QUERY, "result": BODY}, BODY as PuppetDB sent it but on
      # one line (a line break in JSON is white space outside strings and
      # never inside one).
      def to_json_list
        @queries.values.map do |key, body|
          text = body.dup.force_encoding(Encoding::UTF_8).tr("\r\n", '  ')
          +'{"query":' << key << ',"result":' << text << '}'
        end
      end

      def empty?
        @queries.empty?
      end
    end

    # Missing answers puppetdb_query() in a worker without PuppetDB.
    module Missing
      def query_puppetdb(_query)
        raise Puppet::Error, 'puppetdb_query needs --puppetdb: the compile farm was started without a PuppetDB to query'
      end
    end

    # PlainHTTP lets server_urls name http:// URLs (as written, path
    # removed); https:// ones are checked by the terminus's own code.
    module PlainHTTP
      def convert_and_validate_urls(uri_strings)
        uri_strings.flat_map do |s|
          next super([s]) unless s.strip.start_with?('http://')

          uri = URI(s.strip)
          raise "PuppetDB 'server_urls' cannot contain URL paths, found '#{s}'" unless ['', '/'].include?(uri.path)

          uri.path = ''
          [uri]
        end
      end
    end

    # QueryHook records puppetdb_query's query with the body PuppetDB
    # answered (caught by HttpHook).
    module QueryHook
      def query_puppetdb(query)
        prev = $cf_pdb_answer
        $cf_pdb_answer = :function
        result = super
        answer = $cf_pdb_answer
        $cf_queries&.add(query, answer.body) if answer.respond_to?(:body)
        result
      ensure
        $cf_pdb_answer = prev
      end
    end

    # HttpHook sees every PuppetDB query's answer: it keeps the one
    # query_puppetdb waits for in $cf_pdb_answer, hands the terminus's to
    # $cf_pdb_capture, fails one that PuppetDB
    # refused with PuppetDB's own message (the function would only fail to
    # parse it as JSON), and makes a query no PuppetDB answered Unavailable.
    module HttpHook
      def action(path_suffix, request_mode, &http_callback)
        return super unless request_mode == :query

        begin
          response = super
        rescue Puppet::Util::Puppetdb::NotFoundError
          raise
        rescue Puppet::Error => e
          raise Unavailable, e.message
        end
        if $cf_pdb_answer == :function
          unless response.success?
            body = response.body.to_s.gsub(/[\r\n]+/, ' ').strip
            raise Puppet::Error, "PuppetDB refused the query: #{response.code} #{response.reason}: #{body}"
          end
          $cf_pdb_answer = response
        end
        $cf_pdb_capture&.call(path_suffix, response)
        response
      end
    end

    # TerminusHook records the resources query of an exported collector
    # (storeconfigs puppetdb), as the root query ["from", "resources",
    # QUERY], which PuppetDB answers with the same rows.
    module TerminusHook
      RESOURCES = '/pdb/query/v4/resources?query='

      def search(request)
        prev = $cf_pdb_capture
        path = body = nil
        $cf_pdb_capture = lambda do |suffix, response|
          path = suffix
          body = response.body if response.success?
        end
        begin
          found = super
        ensure
          $cf_pdb_capture = prev
        end
        if body && path&.start_with?(RESOURCES)
          query = ['from', 'resources', JSON.parse(CGI.unescape(path.delete_prefix(RESOURCES)))]
          $cf_queries&.add(query, body)
        end
        found
      end
    end
  end
end
