# frozen_string_literal: true
#
# Recording the facts a compile reads: ERB templates, whose variables are
# instance variables Ruby cannot observe (their compiled Ruby is lexed for
# @names instead).

require 'ripper'

module CompileFarm
  module Reads
    # What an ERB template's compiled Ruby reveals, cached by source.
    class ErbInfo
      DYNAMIC = %w[instance_variable_get instance_variables instance_variable_defined? eval instance_eval
                   instance_exec binding send __send__ public_send method].to_h { |n| [n, true] }.freeze
      NONDET_CONSTS = %w[Time Date DateTime Random SecureRandom].to_h { |n| [n, true] }.freeze
      CLOCK_CONSTS = %w[Time Date DateTime].to_h { |n| [n, true] }.freeze
      NONDET_IDENTS = %w[rand srand system spawn exec fork].to_h { |n| [n, true] }.freeze
      CACHE_MAX = 512
      @cache = {}

      # nondet names the first non-deterministic thing the template uses;
      # clock is true when everything it found only reads the clock.
      attr_reader :names, :dynamic, :nondet, :clock

      def self.for(source)
        info = @cache[source]
        return info if info

        @cache.shift while @cache.size >= CACHE_MAX
        @cache[source.frozen? ? source : source.dup.freeze] = new(source)
      end

      def initialize(source)
        names = {}
        @dynamic = false
        @nondet = nil
        @clock = true
        found = {}
        Ripper.lex(Puppet::Util.create_erb(source).src).each do |(_, type, tok, _)|
          case type
          when :on_ivar
            name = tok[1..]
            names[name] = true unless name.start_with?('__')
          when :on_ident
            @dynamic = true if DYNAMIC[tok]
            if NONDET_IDENTS[tok]
              found["#{tok}()"] = true
              @clock = false
            end
          when :on_const
            if NONDET_CONSTS[tok]
              found[tok] = true
              @clock &&= CLOCK_CONSTS.key?(tok)
            end
          when :on_backtick
            found['a command'] = true
            @clock = false
          end
        end
        @nondet = found.keys.join(', ') unless found.empty?
        @names = names.keys.freeze
      end
    end

    # Puppet::Parser::TemplateWrapper#result (Puppet 7.23), with the
    # variables bound without counting as reads and the template's @names
    # resolved through the scope instead.
    module TemplateHook
      def result(string = nil)
        r = $cf_reads
        return super unless r&.erb_on

        if string
          template_source = 'inline template'
        else
          string = Puppet::FileSystem.read_preserve_line_endings(@__file__)
          template_source = @__file__
        end
        escaped_template_source = template_source.gsub(/%/, '%%')
        benchmark(:debug, _('Bound template variables for %{template_source} in %%{seconds} seconds') % { template_source: escaped_template_source }) do
          r.suspend { scope.to_hash }.each do |name, value|
            realname = name.gsub(/[^\w]/, '_')
            instance_variable_set("@#{realname}", value)
          end
        end
        r.erb(scope, string, template_source)

        result = nil
        benchmark(:debug, _('Interpolated template %{template_source} in %%{seconds} seconds') % { template_source: escaped_template_source }) do
          template = Puppet::Util.create_erb(string)
          template.filename = @__file__
          result = template.result(binding)
        end
        result
      end
    end
  end
end
