# Exports from a class, and from a defined resource in it.
class wire::exporter {
  @@wire::svc { "class-${trusted['certname']}": port => 443 }
  wire::holder { 'h1': }
}
