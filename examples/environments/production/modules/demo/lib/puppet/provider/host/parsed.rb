# frozen_string_literal: true

require 'puppet/provider/parsedfile'

# Hosts file lines, through Puppet's ParsedFile: "ip name [aliases...] [# comment]".
# Only the hosts files the catalog's host resources name are read (not
# the default target when no resource uses it), and Puppet's header lines
# are not kept when the file is written again.
Puppet::Type.type(:host).provide(:parsed, parent: Puppet::Provider::ParsedFile,
                                          default_target: '/etc/hosts', filetype: :flat) do
  desc 'Manages host entries in a hosts file.'

  text_line :comment, match: /\A\s*#/
  text_line :blank, match: /\A\s*\z/

  record_line name,
              fields: %w[ip name host_aliases comment],
              optional: %w[host_aliases comment],
              match: /\A\s*(\S+)\s+(\S+)[ \t]*([^#]*?)[ \t]*(?:#[ \t]*(.*?))?[ \t]*\z/,
              post_parse: proc { |h|
                aliases = h[:host_aliases]
                h[:host_aliases] = aliases.is_a?(String) && !aliases.empty? ? aliases.split(/\s+/) : []
                h[:comment] = :absent if h[:comment].nil? || h[:comment] == ''
              },
              to_line: proc { |h|
                line = [h[:ip], h[:name]]
                aliases = h[:host_aliases]
                line.concat(Array(aliases)) unless aliases.nil? || aliases == :absent || aliases == [:absent]
                comment = h[:comment]
                line << "# #{comment}" unless comment.nil? || comment == :absent || comment == ''
                line.join("\t")
              }

  def self.targets(resources = nil)
    return super if resources.nil?

    resources.values.map { |r| r.should(:target) || default_target }.uniq
  end

  def self.parse(text)
    super(text.lines.reject { |l| l.start_with?('# HEADER: ') }.join)
  end
end
