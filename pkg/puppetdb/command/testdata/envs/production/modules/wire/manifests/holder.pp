# Exports from inside a defined resource.
define wire::holder {
  @@notify { "held ${title}": message => "in ${title}" }
}
