package command

import (
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/facts"
)

// FactsInput is what replace facts is made of.
type FactsInput struct {
	// Certname is the node: the name its certificate was verified for.
	Certname string
	// Facts is the node's facts document as its agent sent it
	// ({"name","values","timestamp","expiration"}).
	Facts []byte
	// TrustedExtensions are the Puppet extensions of the node's
	// certificate as $trusted['extensions'] names them
	// (nodeinfo.Info.TrustedExtensions); nil for none.
	TrustedExtensions map[string]string
	// Environment is the environment the agent asked for with the facts.
	Environment string
	// Producer is the certname of the farm, which sends the command.
	Producer string
	// ProducerTimestamp is when the farm received the facts.
	ProducerTimestamp time.Time
}

// Facts returns the payload of replace facts (ReplaceFacts) that
// Puppet::Node::Facts::Puppetdb#save sends when Puppet Server saves the
// facts an agent sent with its catalog request: the values with the
// node's trusted data added as "trusted" (as Puppet Server computes it for
// a client certificate: authenticated "remote", hostname and domain split
// off the certname, no external data), without "_timestamp" (which
// Puppet::Node::Facts takes out of the values) and "_puppet_inventory_1",
// whose "packages" are sent as package_inventory.
func Facts(in FactsInput) ([]byte, error) {
	if in.Certname == "" {
		return nil, invalid("replace facts: no certname")
	}
	if in.Environment == "" {
		return nil, invalid("replace facts for %s: no environment", in.Certname)
	}
	if in.ProducerTimestamp.IsZero() {
		return nil, invalid("replace facts for %s: no producer timestamp", in.Certname)
	}
	doc, isLossy := text(in.Facts)
	d, err := facts.Decode(in.Certname, doc)
	if err != nil {
		return nil, invalid("replace facts for %s: %v", in.Certname, err)
	}
	values := d.Values
	delete(values, "_timestamp")
	inventory, hasInventory := values["_puppet_inventory_1"]
	delete(values, "_puppet_inventory_1")
	values["trusted"] = trusted(in.Certname, in.TrustedExtensions)

	payload := map[string]any{
		"certname":           in.Certname,
		"values":             values,
		"environment":        in.Environment,
		"producer_timestamp": WireTime(in.ProducerTimestamp),
		"producer":           orNull(in.Producer),
	}
	// The terminus sends package_inventory whenever the fact is truthy:
	// its packages when it is a hash, else nil.
	if hasInventory && inventory != nil && inventory != false {
		var packages any
		if m, ok := inventory.(map[string]any); ok {
			packages = m["packages"]
		}
		payload["package_inventory"] = packages
	}
	b, err := encode(payload, isLossy)
	if err != nil {
		return nil, invalid("replace facts for %s: %v", in.Certname, err)
	}
	return b, nil
}

// trusted is $trusted as Puppet::Context::TrustedInformation#to_h gives
// it for a node with a verified certificate
// (TrustedInformation.remote), with no trusted_external_command.
func trusted(certname string, extensions map[string]string) map[string]any {
	exts := make(map[string]any, len(extensions))
	for k, v := range extensions {
		exts[k] = v
	}
	// Ruby's certname.split('.', 2): no domain (nil) without a dot.
	host, d, ok := strings.Cut(certname, ".")
	var domain any
	if ok {
		domain = d
	}
	return map[string]any{
		"authenticated": "remote",
		"certname":      certname,
		"extensions":    exts,
		"hostname":      host,
		"domain":        domain,
		"external":      map[string]any{},
	}
}
