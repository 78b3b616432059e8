package main

// clockMaxAgeUsage documents --clock-max-age, on dev and serve.
const clockMaxAgeUsage = "a catalog that read the current time (Timestamp(), time(), strftime; puppetlabs-apt's daily or weekly update frequency) " +
	"is served this long after its compile, then the next check-in compiles it again (Puppet Server compiles with the time of every run)"
