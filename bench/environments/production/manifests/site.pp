# Benchmark site: every node gets the same profile, parameterised by its facts.
node default {
  include bench
}
