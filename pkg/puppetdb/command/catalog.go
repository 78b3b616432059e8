package command

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/catalog"
)

// CatalogInput is what replace catalog is made of.
type CatalogInput struct {
	// Catalog is the catalog the farm serves the node (Puppet's catalog
	// JSON as agents get it, static or not).
	Catalog []byte
	// Exports are the resources the node exports, as the farm keeps them
	// beside its catalog (the JSON list farm.Node.ExportsDigest names:
	// compiler.ExportedResource, parameters as rich data with sensitive
	// ones marked Sensitive); nil for none.
	Exports []byte
	// TransactionUUID and JobID are those of the agent run the catalog
	// was compiled for (the catalog request's transaction_uuid and job_id);
	// empty when unknown.
	TransactionUUID string
	JobID           string
	// Producer is the certname of the farm, which sends the command.
	Producer string
	// ProducerTimestamp is when the node's catalog became this one.
	ProducerTimestamp time.Time
}

// Catalog returns the payload of replace catalog (ReplaceCatalog) that
// Puppet::Resource::Catalog::Puppetdb#save sends for the catalog Puppet
// Server compiled, before it filters it for the agent: the served
// catalog's resources and the node's exported resources (exported true,
// with their containment edges), parameters as ToStringifiedConverter
// writes them, sensitive ones left out, namevar aliases added, unordered
// metaparameters sorted, and an edge for each before, require, notify and
// subscribe (munge_catalog). What Puppet Server would not send (file
// metadata, classes, tags) is left out.
//
// The container of an exported resource is its entry's "container"
// ("Class[Foo]") when the farm recorded one. Without it, as Puppet tags a
// resource with all its container's tags, it is the class, node or
// defined resource of the catalog with the most tags that are all among
// the exported resource's; no containment edge when two such tie or none
// is found.
func Catalog(in CatalogInput) ([]byte, error) {
	if in.ProducerTimestamp.IsZero() {
		return nil, invalid("replace catalog: no producer timestamp")
	}
	doc, isLossy := text(in.Catalog)
	c, err := catalog.Parse(doc)
	if err != nil {
		return nil, invalid("replace catalog: %v", err)
	}
	if c.Name == "" {
		return nil, invalid("replace catalog: the catalog has no name")
	}
	if c.Environment == "" {
		return nil, invalid("replace catalog for %s: the catalog has no environment", c.Name)
	}
	exports, exportsLossy := text(in.Exports)
	payload, err := catalogPayload(c, exports, in)
	if err != nil {
		return nil, invalid("replace catalog for %s: %v", c.Name, err)
	}
	b, err := encode(payload, isLossy || exportsLossy)
	if err != nil {
		return nil, invalid("replace catalog for %s: %v", c.Name, err)
	}
	return b, nil
}

// resource is one resource of the catalog as the terminus handles it.
type resource struct {
	data      map[string]any // the resource hash sent
	params    map[string]any // data["parameters"], stringified
	raw       map[string]any // the parameters as rich data JSON
	sensitive []string       // names of the parameters left out
	virtual   bool           // exported and not collected: not in the agent's catalog
	tags      []string
}

func (r *resource) typ() string   { return r.data["type"].(string) }
func (r *resource) title() string { return r.data["title"].(string) }

// ref is a resource's {type, title} in an edge.
func ref(typ, title string) map[string]any { return map[string]any{"type": typ, "title": title} }

// graph is the catalog the terminus munges: its resources (with the
// exported ones the agent's catalog lacks) and edges.
type graph struct {
	st        stringifier
	resources []*resource
	byRef     map[[2]string]*resource
	edges     []map[string]any
}

func (g *graph) add(r *resource) {
	g.resources = append(g.resources, r)
	g.byRef[[2]string{r.typ(), r.title()}] = r
}

func (g *graph) find(typ, title string) *resource { return g.byRef[[2]string{typ, title}] }

func catalogPayload(c *catalog.Catalog, exports []byte, in CatalogInput) (map[string]any, error) {
	g := &graph{byRef: map[[2]string]*resource{}}
	if err := g.addCatalog(c); err != nil {
		return nil, err
	}
	if err := g.addExports(exports); err != nil {
		return nil, err
	}
	for _, r := range g.resources {
		addNamevarAlias(r)
		sortUnorderedMetaparams(r.params)
	}
	synthesized, err := g.synthesizeEdges()
	if err != nil {
		return nil, err
	}
	g.edges = uniqEdges(append(g.edges, synthesized...))
	p, err := header(c, in)
	if err != nil {
		return nil, err
	}
	p["resources"] = g.redacted()
	p["edges"] = g.edges
	return p, nil
}

// addCatalog adds the resources and containment edges of the agent's
// catalog.
func (g *graph) addCatalog(c *catalog.Catalog) error {
	for i := range c.Resources {
		r, err := catalogResource(&g.st, &c.Resources[i])
		if err != nil {
			return err
		}
		g.add(r)
	}
	for _, e := range c.Edges {
		edge, err := containmentEdge(e)
		if err != nil {
			return err
		}
		g.edges = append(g.edges, edge)
	}
	return nil
}

// addExports adds the node's exported resources that are not in the
// agent's catalog, each with an edge from its container.
func (g *graph) addExports(doc []byte) error {
	exported, err := exportedResources(&g.st, doc)
	if err != nil {
		return err
	}
	for _, x := range exported {
		if g.find(x.r.typ(), x.r.title()) != nil {
			continue // exported and collected by the node itself: in the catalog
		}
		g.add(x.r)
		if from := x.container(g); from != nil {
			g.edges = append(g.edges, map[string]any{
				"source": ref(from.typ(), from.title()), "target": ref(x.r.typ(), x.r.title()), "relationship": "contains",
			})
		}
	}
	return nil
}

// redacted are the resources to send, without their sensitive parameters
// (redact_sensitive_params).
func (g *graph) redacted() []any {
	out := make([]any, len(g.resources))
	for i, r := range g.resources {
		for _, name := range r.sensitive {
			delete(r.params, name)
		}
		out[i] = r.data
	}
	return out
}

// header is the payload's fields about the catalog as a whole.
func header(c *catalog.Catalog, in CatalogInput) (map[string]any, error) {
	var version any
	if len(c.Version) > 0 {
		if err := decode(c.Version, &version); err != nil {
			return nil, fmt.Errorf("version: %v", err)
		}
	}
	jobID := in.JobID
	if raw, ok := c.Extra["job_id"]; ok {
		var v any
		if decode(raw, &v) == nil && v != nil && v != false {
			jobID = rubyToS(v)
		}
	}
	catalogUUID := c.CatalogUUID
	if catalogUUID == "" {
		catalogUUID = in.TransactionUUID
	}
	return map[string]any{
		"certname":           c.Name,
		"version":            rubyToS(version), // stringify_version
		"code_id":            orNull(c.CodeID),
		"job_id":             orNull(jobID),
		"catalog_uuid":       orNull(catalogUUID),
		"transaction_uuid":   orNull(in.TransactionUUID),
		"environment":        c.Environment,
		"producer_timestamp": WireTime(in.ProducerTimestamp),
		"producer":           orNull(in.Producer),
	}, nil
}

// catalogResource is Puppet::Resource#to_data_hash of a resource of the
// agent's catalog with its parameters stringified.
func catalogResource(st *stringifier, cr *catalog.Resource) (*resource, error) {
	raw := map[string]any{}
	if len(cr.Parameters) > 0 && string(cr.Parameters) != "null" {
		if err := decode(cr.Parameters, &raw); err != nil {
			return nil, fmt.Errorf("parameters of %s: %v", cr.Ref(), err)
		}
	}
	data := map[string]any{
		"type":     cr.Type,
		"title":    cr.Title,
		"tags":     nonNil(cr.Tags),
		"exported": cr.Exported,
	}
	if cr.File != "" {
		data["file"] = cr.File
	}
	if cr.Line != 0 {
		data["line"] = cr.Line
	}
	if cr.Kind != "" {
		data["kind"] = cr.Kind
	}
	for k, v := range cr.Extra {
		var x any
		if err := decode(v, &x); err != nil {
			return nil, fmt.Errorf("%s of %s: %v", k, cr.Ref(), err)
		}
		data[k] = x
	}
	r := &resource{data: data, raw: raw, sensitive: cr.SensitiveParameters, tags: cr.Tags}
	r.params = st.value(raw).(map[string]any)
	data["parameters"] = r.params
	return r, nil
}

// exportEntry is one of the resources a node exports, as the farm keeps
// them (compiler.ExportedResource), with the container and kind the farm
// may record.
type exportEntry struct {
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Tags       []string       `json:"tags"`
	Parameters map[string]any `json:"parameters"`
	File       string         `json:"file"`
	Line       int            `json:"line"`
	Kind       string         `json:"kind"`
	Container  string         `json:"container"`
}

// export is an exported resource that is not in the agent's catalog.
type export struct {
	r           *resource
	containerOf string // the recorded container's reference, if any
}

// exportedResources reads the node's exports as to_data_hash gives them
// in the catalog the terminus gets: exported, their sensitive parameters
// (kept as Sensitive) to be left out.
func exportedResources(st *stringifier, doc []byte) ([]export, error) {
	if len(doc) == 0 || string(doc) == "null" {
		return nil, nil
	}
	var list []exportEntry
	if err := decode(doc, &list); err != nil {
		return nil, fmt.Errorf("exported resources: %v", err)
	}
	out := make([]export, 0, len(list))
	for i, e := range list {
		if e.Type == "" || e.Title == "" {
			return nil, fmt.Errorf("exported resource %d has no type or title", i)
		}
		raw := map[string]any{}
		var sensitive []string
		for k, v := range e.Parameters {
			if m, ok := v.(map[string]any); ok && m[pcoreType] == "Sensitive" {
				// Puppet unwraps a sensitive parameter and lists its name.
				sensitive = append(sensitive, k)
				v = m[pcoreValue]
			}
			raw[k] = v
		}
		sort.Strings(sensitive)
		data := map[string]any{"type": e.Type, "title": e.Title, "tags": nonNil(e.Tags), "exported": true}
		if e.File != "" {
			data["file"] = e.File
		}
		if e.Line != 0 {
			data["line"] = e.Line
		}
		if e.Kind != "" {
			data["kind"] = e.Kind
		}
		r := &resource{data: data, raw: raw, sensitive: sensitive, virtual: true, tags: e.Tags}
		r.params = st.value(raw).(map[string]any)
		data["parameters"] = r.params
		out = append(out, export{r: r, containerOf: e.Container})
	}
	return out, nil
}

// container is the resource of the catalog that contains the exported
// resource x (see Catalog), or nil.
func (x export) container(g *graph) *resource {
	if x.containerOf != "" {
		if typ, title, ok := parseRef(x.containerOf); ok {
			return g.find(typ, title)
		}
		return nil
	}
	var best *resource
	tie := false
	for _, r := range g.resources {
		if r.virtual || !canContain(r) || !subset(r.tags, x.r.tags) {
			continue
		}
		switch {
		case best == nil || len(r.tags) > len(best.tags):
			best, tie = r, false
		case len(r.tags) == len(best.tags):
			tie = true
		}
	}
	if tie {
		return nil
	}
	return best
}

// canContain is whether r is a class, node or defined resource, which
// contain the resources declared in them.
func canContain(r *resource) bool {
	switch r.typ() {
	case "Class", "Node":
		return true
	}
	return r.data["kind"] == "defined_type"
}

func subset(a, b []string) bool {
	for _, t := range a {
		if !slices.Contains(b, t) {
			return false
		}
	}
	return true
}

// addNamevarAlias is add_namevar_aliases for one resource: its alias
// metaparameter and, when the resource's name differs from its title, its
// name. A resource's namevar is among the catalog's parameters exactly when
// it differs from the title (to_data_hash leaves it out otherwise; Class
// and Stage main, whose title is a symbol, always have it).
func addNamevarAlias(r *resource) {
	keys := keysOf(r.typ())
	if keys.composite {
		return
	}
	var aliases []any
	var flatten func(v any)
	flatten = func(v any) {
		switch v := v.(type) {
		case nil:
		case []any:
			for _, e := range v {
				flatten(e)
			}
		default:
			aliases = append(aliases, v)
		}
	}
	flatten(r.raw["alias"])
	if !keys.notIsomorphic {
		if name, ok := r.raw[keys.namevar]; ok && name != nil && !containsValue(aliases, name) {
			aliases = append(aliases, name)
		}
	}
	if len(aliases) > 0 {
		r.params["alias"] = aliases
	}
}

func containsValue(list []any, v any) bool {
	for _, e := range list {
		if rubyInspect(e) == rubyInspect(v) {
			return true
		}
	}
	return false
}

// unorderedMetaparams may hold arrays whose order means nothing.
var unorderedMetaparams = []string{"alias", "audit", "before", "check", "notify", "require", "subscribe", "tag"}

// sortUnorderedMetaparams sorts those metaparameters' arrays by their
// elements' to_s, as sort_unordered_metaparams does.
func sortUnorderedMetaparams(params map[string]any) {
	for _, name := range unorderedMetaparams {
		list, ok := params[name].([]any)
		if !ok || len(list) == 0 {
			continue
		}
		sorted := slices.Clone(list)
		sort.SliceStable(sorted, func(i, j int) bool { return rubyToS(sorted[i]) < rubyToS(sorted[j]) })
		params[name] = sorted
	}
}

// refPattern is resource_ref_to_hash's: Type[title].
var refPattern = regexp.MustCompile(`(?ms)^([^\[\]]+)\[(.+)\]$`)

func parseRef(s string) (typ, title string, ok bool) {
	m := refPattern.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// containmentEdge is an edge of the agent's catalog as munge_edges makes
// it: source and target as {type, title}, relationship "contains".
func containmentEdge(e catalog.Edge) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range e.Extra {
		var x any
		if err := decode(v, &x); err != nil {
			return nil, fmt.Errorf("edge %s -> %s: %s: %v", e.Source, e.Target, k, err)
		}
		out[k] = x
	}
	for k, s := range map[string]string{"source": e.Source, "target": e.Target} {
		typ, title, ok := parseRef(s)
		if !ok {
			return nil, fmt.Errorf("edge %s -> %s: %q is not a resource reference", e.Source, e.Target, s)
		}
		out[k] = ref(typ, title)
	}
	if out["relationship"] == nil || out["relationship"] == false {
		out["relationship"] = "contains"
	}
	return out, nil
}

// relationships are the metaparameters that make edges, in the
// terminus's order, with the edge's relationship and direction.
var relationships = []struct {
	param, relationship string
	forward             bool
}{
	{"before", "before", true},
	{"require", "required-by", false},
	{"notify", "notifies", true},
	{"subscribe", "subscription-of", false},
}

// validRef is what synthesize_edges requires of a reference.
var validRef = regexp.MustCompile(`(?ms)^[A-Z][a-z0-9_]*(::[A-Z][a-z0-9_]*)*\[.*\]`)

// trailingSlashes are what synthesize_edges takes off a File reference.
var trailingSlashes = regexp.MustCompile(`(?m)/+$`)

// synthesizeEdges is synthesize_edges: an edge for every reference in a
// relationship metaparameter of a resource in the agent's catalog, to a
// resource found by title or alias. A reference to a resource that is not
// there, or only exported, is an error, as it is to the terminus (Puppet
// Server then fails the agent's catalog request).
func (g *graph) synthesizeEdges() ([]map[string]any, error) {
	aliases := map[[2]string]*resource{}
	for _, r := range g.resources {
		names, ok := r.params["alias"].([]any)
		if !ok {
			names = []any{r.params["alias"]}
		}
		for _, n := range names {
			if s, ok := n.(string); ok {
				aliases[[2]string{r.typ(), s}] = r
			}
		}
	}
	var edges []map[string]any
	for _, r := range g.resources {
		if r.virtual {
			continue
		}
		for _, rel := range relationships {
			value := r.params[rel.param]
			if value == nil || value == false {
				continue
			}
			for _, other := range flat(value) {
				what := func(why string) error {
					return fmt.Errorf("invalid relationship: %s[%s] { %s => %s }, because %s", r.typ(), r.title(), rel.param, rubyToS(other), why)
				}
				s, ok := other.(string)
				if !ok || !validRef.MatchString(s) {
					return nil, what(rubyToS(other) + " doesn't seem to be in the correct format")
				}
				typ, title, _ := parseRef(s)
				if typ == "File" && strings.HasSuffix(title, "/") {
					if loc := trailingSlashes.FindStringIndex(title); loc != nil {
						title = title[:loc[0]] + title[loc[1]:]
					}
				}
				target := g.find(typ, title)
				if target == nil {
					target = aliases[[2]string{typ, title}]
				}
				if target == nil {
					return nil, what(s + " doesn't seem to be in the catalog")
				}
				if target.virtual {
					return nil, what(s + " is exported but not collected")
				}
				this, that := ref(r.typ(), r.title()), ref(typ, target.title())
				if !rel.forward {
					this, that = that, this
				}
				edges = append(edges, map[string]any{"relationship": rel.relationship, "source": this, "target": that})
			}
		}
	}
	return edges, nil
}

// flat is [v].flatten.
func flat(v any) []any {
	list, ok := v.([]any)
	if !ok {
		return []any{v}
	}
	var out []any
	for _, e := range list {
		out = append(out, flat(e)...)
	}
	return out
}

// uniqEdges is Array#uniq: each edge once, where it first appears.
func uniqEdges(edges []map[string]any) []map[string]any {
	out := make([]map[string]any, 0, len(edges))
	seen := map[string]bool{}
	for _, e := range edges {
		k, _ := json.Marshal(e) // map keys sorted: equal hashes, equal text
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, e)
		}
	}
	return out
}

// nonNil is s, or an empty list when s is nil.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
