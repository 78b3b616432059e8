# frozen_string_literal: true
#
# Recording the facts a compile reads: what makes a compile depend on more
# than facts and code (functions, the clock, commands), marking it "always
# recompile".

module CompileFarm
  module Reads
    # Functions whose result is not a function of facts and code (keyed by
    # name as String and Symbol: Puppet's profiler gets either).
    NONDET_FUNCTIONS = {
      'generate' => 'generate() runs a command',
      'time' => 'time() reads the clock',
      'shuffle' => 'shuffle() is random',
      'str2saltedsha512' => 'str2saltedsha512() uses a random salt',
    }.flat_map { |k, v| [[k, v], [k.to_sym, v]] }.to_h.freeze
    # Those of them that only read the current time.
    CLOCK_FUNCTIONS = %w[time].flat_map { |k| [[k, true], [k.to_sym, true]] }.to_h.freeze

    module ProfileHook
      def profile(message, metric_id, &block)
        if (r = $cf_reads) && metric_id.is_a?(Array) && metric_id[0] == :functions &&
           (why = NONDET_FUNCTIONS[metric_id[1]])
          r.nondet(why, clock: CLOCK_FUNCTIONS.key?(metric_id[1]))
        end
        super
      end
    end

    module TimestampHook
      def now
        r = $cf_reads and r.nondet('Timestamp.now (Timestamp.new() or Timestamp()) reads the clock', clock: true)
        super
      end

      def format_time(format, time, timezone)
        if (r = $cf_reads) && caller_locations(1, 1).first&.label == 'legacy_strftime'
          r.nondet('strftime(format) formats the current time', clock: true)
        end
        super
      end
    end

    module ExecuteHook
      def execute(*args, **kw, &blk)
        r = $cf_reads and r.nondet('a function ran a command (generate() or Puppet::Util::Execution.execute)')
        super
      end
    end
  end
end
