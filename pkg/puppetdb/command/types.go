package command

import "strings"

// The catalog terminus adds a resource's name to its aliases when it
// differs from its title (add_namevar_aliases). What the name is depends
// on the resource's Ruby type, which only Puppet has loaded: its namevar
// (Puppet::Resource#namevar), whether it has several key attributes (then
// no alias is added) and whether it is isomorphic (if not, its name is no
// alias). A catalog does not say, so this package knows the types that
// differ from the rule every other type follows (one key attribute, name,
// isomorphic): Puppet 7's own and those of the modules Debian packages.
// The reference test checks this table against Puppet's.

// typeKeys is what add_namevar_aliases asks a resource's type.
type typeKeys struct {
	namevar       string // the only key attribute
	composite     bool   // several key attributes: no alias is added
	notIsomorphic bool   // its name is no alias
}

// knownTypes are the types whose keys differ from the rule, by lower-case
// name.
var knownTypes = map[string]typeKeys{
	"exec":          {namevar: "command", notIsomorphic: true},
	"file":          {namevar: "path"},
	"package":       {composite: true},                      // name, provider, command
	"tidy":          {namevar: "path", notIsomorphic: true}, // puppet 7
	"sshkey":        {composite: true},                      // sshkeys_core: name, type
	"concat_file":   {namevar: "path"},                      // puppetlabs-concat
	"apt_key":       {namevar: "id"},                        // puppetlabs-apt
	"mysql_datadir": {namevar: "datadir"},                   // puppetlabs-mysql
}

// keysOf returns the keys of the resource type named typ ("File",
// "Apache::Vhost"): a defined type, class or node, and any type not
// listed, has the single key attribute name and is isomorphic.
func keysOf(typ string) typeKeys {
	if k, ok := knownTypes[strings.ToLower(typ)]; ok {
		if k.namevar == "" {
			k.namevar = "name"
		}
		return k
	}
	return typeKeys{namevar: "name"}
}
