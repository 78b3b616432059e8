#!/bin/sh
# A test external node classifier: what it does depends on the certname ($last).
for node; do :; done
case "$node" in
  web.example.test) printf -- '---\nclasses:\n  - role::web\nparameters:\n  tier: gold\nenvironment: staging\n' ;;
  fail.example.test) echo "no such node in the CMDB" >&2; exit 3 ;;
  slow.example.test) sleep 30 ;;
  empty.example.test) ;;
  args.example.test) printf 'parameters:\n  argv: "%s"\n' "$*" ;;
  *) echo "unknown node $node" >&2; exit 1 ;;
esac
