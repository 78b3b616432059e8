# frozen_string_literal: true
#
# Exported resources without PuppetDB.
#
# Puppet collects exported resources (Type <<| query |>>) in
# Puppet::Pops::Evaluator::Collectors::ExportedCollector#collect, which
# searches the Puppet::Resource indirection with the collector's type as key
# and :host (the node compiled), :filter (the query as nested arrays,
# [lhs, op, rhs] with op ==, !=, and, or) and :scope. With storeconfigs on,
# that indirection's terminus is :store_configs, which hands every request to
# the terminus named by storeconfigs_backend: normally :puppetdb (the
# PuppetDB terminus turns the filter into a PuppetDB query), here
# :compilefarm (Puppet::Resource::Compilefarm, in
# lib/puppet/indirector/resource/compilefarm.rb), which evaluates the
# filter over the request's "exported" list, the resources the farm stores
# for the other nodes of the environment, exactly as the PuppetDB terminus
# does: resources of that type, exported by another node; tag compared
# case-insensitively, title and parameters exactly (a parameter that is an
# array also matches one of its elements); != is the negation of == (a
# resource without the parameter matches). Found resources become
# Puppet::Parser::Resource with the exporter's parameters and a collector_id
# "certname|Type|title", as the PuppetDB terminus builds them; the collector
# then adds them to the catalog as ordinary (not exported) resources. The
# node's own exported resources are collected from its own catalog, by
# Puppet itself.
# With --storeconfigs=puppetdb the backend is :puppetdb instead, Puppet's
# own terminus (see puppetdb.rb): collectors read PuppetDB, and the
# request's "exported" list is not used.
#
# The storeconfigs setting also makes Puppet cache catalogs and facts in the
# storeconfigs backend (its hook sets the catalog and facts indirections'
# cache_class); Exports.install undoes that: the worker stores nothing.
#
# Exports.describe renders a resource of the node's own catalog that it
# exports (taken before the catalog is filtered for the agent), and Context
# records, per exported collector, the nodes whose resources it matched.

module CompileFarm
  module Exports
    PTYPE = Puppet::Pops::Serialization::PCORE_TYPE_KEY
    PVALUE = Puppet::Pops::Serialization::PCORE_VALUE_KEY
    SENSITIVE = Puppet::Pops::Serialization::PCORE_TYPE_SENSITIVE

    # QueryError: a query the farm does not evaluate; raised again with the
    # collector's location.
    class QueryError < Puppet::Error; end

    # The storeconfigs backends a worker may use, by name: their termini.
    BACKENDS = { 'compilefarm' => 'Puppet::Resource::Compilefarm', 'puppetdb' => 'Puppet::Resource::Puppetdb' }.freeze

    class << self
      # install switches storeconfigs on with backend (this worker's
      # terminus, "compilefarm", or PuppetDB's, "puppetdb"), and nothing
      # else.
      def install(backend = 'compilefarm')
        raise ArgumentError, "unknown storeconfigs backend #{backend} (known: compilefarm, puppetdb)" unless BACKENDS.key?(backend)

        Puppet[:storeconfigs_backend] = backend
        Puppet[:storeconfigs] = true
        Puppet::Resource::Catalog.indirection.set_global_setting(:cache_class, nil)
        Puppet::Node::Facts.indirection.set_global_setting(:cache_class, nil)
        Puppet.settings.override_default(:catalog_cache_terminus, nil)
        Puppet::Pops::Evaluator::Collectors::ExportedCollector.prepend(CollectorHook)
        Puppet::Pops::Evaluator::CollectorTransformer.prepend(TransformHook)
        check(backend)
      end

      # check fails unless collection reaches backend's terminus and
      # nothing is cached anywhere.
      def check(backend)
        resource = Puppet::Resource.indirection
        found = resource.terminus(resource.terminus_class)
        found = found.target if found.respond_to?(:target)
        want = BACKENDS[backend]
        raise "exported resources would be searched with #{found.class}, not #{want}" unless found.class.to_s == want

        [Puppet::Resource::Catalog, Puppet::Node::Facts, Puppet::Node].each do |model|
          cache = model.indirection.cache_class
          raise "#{model} would be cached with #{cache}" if cache
        end
        cache = Puppet[:catalog_cache_terminus]
        raise "catalogs would be cached with #{cache}" if cache
      end

      # context validates the request's exported resources.
      def context(certname, list)
        list = [] if list.nil?
        raise BadRequest, 'exported must be a list' unless list.is_a?(Array)

        list.each_with_index do |r, i|
          raise BadRequest, "exported[#{i}] is not an object" unless r.is_a?(Hash)

          %w[certname type title].each do |k|
            v = r[k]
            raise BadRequest, "exported[#{i}].#{k} must be a non-empty string" unless v.is_a?(String) && !v.empty?
          end
          raise BadRequest, "exported[#{i}].parameters must be an object" unless r['parameters'].nil? || r['parameters'].is_a?(Hash)
          raise BadRequest, "exported[#{i}].tags must be a list of strings" unless r['tags'].nil? || (r['tags'].is_a?(Array) && r['tags'].all?(String))
        end
        Context.new(certname, list)
      end

      # describe renders an exported resource of the catalog as the farm
      # stores it: parameters as rich data (a sensitive parameter stays
      # Sensitive), whatever the environment's rich_data setting.
      def describe(resource, catalog = nil)
        data = Puppet.override({ rich_data: true }, 'compilefarm exports') { resource.to_data_hash }
        params = data['parameters']
        if params
          Array(data['sensitive_parameters']).each do |name|
            params[name] = { PTYPE => SENSITIVE, PVALUE => params[name] } if params.key?(name)
          end
        end
        out = { 'type' => data['type'], 'title' => data['title'], 'tags' => data['tags'] || [] }
        out['parameters'] = params if params && !params.empty?
        out['file'] = data['file'] if data['file']
        out['line'] = data['line'] if data['line']
        out['kind'] = data['kind'] if data['kind']
        # Its container (a class, node or defined resource), for the
        # containment edge PuppetDB's catalog has, as Puppet Server sends it.
        container = catalog&.container_of(resource)
        out['container'] = container.ref if container
        out
      end

      # compile turns a collector's filter into a predicate over exported
      # resources (the hashes of the request), or raises QueryError for what
      # the farm does not support.
      def compile(filter)
        return ->(_) { true } if filter.nil?
        raise QueryError, "Exported resource query #{filter.inspect} is not supported" unless filter.is_a?(Array) && filter.length == 3

        lhs, op, rhs = filter
        case op
        when 'and', 'or'
          l = compile(lhs)
          r = compile(rhs)
          op == 'and' ? ->(x) { l.call(x) && r.call(x) } : ->(x) { l.call(x) || r.call(x) }
        when '==', '!='
          p = predicate(lhs, op, rhs)
          op == '==' ? p : ->(x) { !p.call(x) }
        else
          # The PuppetDB terminus's own message.
          raise QueryError, "Operator #{op} in #{filter.inspect} not supported"
        end
      end

      def predicate(field, op, value)
        unless field.is_a?(String)
          raise QueryError, "Exported resource query: the left side of #{op} must be tag, title or a parameter name, not #{field.inspect}"
        end

        case field
        when 'tag'
          unless value.is_a?(String)
            raise QueryError, "Exported resource query: a tag must be compared with a string, not #{value.inspect}"
          end

          tag = value.downcase
          ->(r) { (t = r['tags']) ? t.any? { |x| x.casecmp?(tag) } : false }
        when 'title'
          unless value.is_a?(String)
            raise QueryError, "Exported resource query: title must be compared with a string, not #{value.inspect}"
          end

          ->(r) { r['title'] == value }
        else
          unless data?(value)
            what = value.nil? ? 'undef' : value.inspect
            raise QueryError, "Exported resource query: parameter #{field} cannot be compared with #{what} " \
                                 '(only strings, numbers, booleans, and arrays and hashes of them)'
          end

          lambda do |r|
            params = r['parameters']
            next false unless params&.key?(field)

            v = params[field]
            equal?(v, value) || (v.is_a?(Array) && !value.is_a?(Array) && v.any? { |e| equal?(e, value) })
          end
        end
      end

      # data? tells whether v is JSON data a stored parameter can equal.
      def data?(v)
        case v
        when String, Integer, Float, true, false then true
        when Array then v.all? { |e| data?(e) }
        when Hash then v.all? { |k, e| k.is_a?(String) && data?(e) }
        else false
        end
      end

      # equal? compares JSON values as PuppetDB does: no coercion between
      # strings, numbers and booleans; strings case-sensitively.
      def equal?(a, b)
        case a
        when Numeric then b.is_a?(Numeric) && a == b
        when String then b.is_a?(String) && a == b
        when true, false then a.equal?(b)
        when Array then b.is_a?(Array) && a.length == b.length && a.zip(b).all? { |x, y| equal?(x, y) }
        when Hash then b.is_a?(Hash) && a.length == b.length && a.all? { |k, x| b.key?(k) && equal?(x, b[k]) }
        else false
        end
      end
    end

    # Context is one compile's exported resources and collectors.
    class Context
      attr_reader :certname

      def initialize(certname, list)
        @certname = certname
        @by_type = list.group_by { |r| r['type'] }
        @collects = [] # [type, {certname => true}], in evaluation order
        @by_collector = {}.compare_by_identity
        @current = nil
      end

      # collecting runs the block (ExportedCollector#collect) with the
      # collector's entry current.
      def collecting(collector, type)
        entry = @by_collector[collector] ||= [type.to_s, {}].tap { |e| @collects << e }
        prev = @current
        @current = entry
        begin
          yield
        ensure
          @current = prev
        end
      end

      # search returns the exported resources of type, of nodes but host,
      # that filter matches.
      def search(type, host, filter)
        pred = Exports.compile(filter)
        found = (@by_type[type] || []).select { |r| r['certname'] != host && pred.call(r) }
        found.each { |r| @current[1][r['certname']] = true } if @current
        found
      end

      def collects
        @collects.map do |type, matched|
          c = { 'type' => type }
          c['matched'] = matched.keys.sort unless matched.empty?
          c
        end
      end
    end

    module CollectorHook
      def collect
        ctx = $cf_exports
        return super unless ctx

        ctx.collecting(self, @type) { super }
      rescue QueryError => e
        file, line, pos = @cf_where
        raise Puppet::ParseError.new(e.message, file, line, pos)
      end
    end

    # TransformHook notes where each exported collector is in the code.
    module TransformHook
      def transform(o, scope)
        coll = super
        if coll.is_a?(Puppet::Pops::Evaluator::Collectors::ExportedCollector)
          coll.instance_variable_set(:@cf_where, [o.file, o.line, o.pos])
        end
        coll
      end
    end
  end
end
