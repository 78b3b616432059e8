package main

import (
	"strconv"
	"strings"
	"time"
)

// defaultProviders are the providers Puppet 7 uses on Debian for the
// common types, named in provider_used.
var defaultProviders = map[string]string{
	"File": "posix", "Exec": "posix", "Package": "apt", "Service": "systemd", "User": "useradd",
	"Group": "groupadd", "Cron": "crontab", "Host": "parsed", "Mount": "parsed", "Ssh_authorized_key": "parsed",
}

// agentResources are the resources the agent adds to every catalog it
// applies, each with a status in every report.
var agentResources = []string{"Schedule[puppet]", "Schedule[hourly]", "Schedule[daily]", "Schedule[weekly]",
	"Schedule[monthly]", "Schedule[never]", "Filebucket[puppet]"}

// isContainer reports whether a catalog resource of type typ is a
// container (stage, node, class, defined type), which reports carry no
// status for: defined types are the ones with "::" in their name.
func isContainer(typ string) bool {
	return typ == "Class" || typ == "Stage" || typ == "Node" || typ == "Admissible_class" || strings.Contains(typ, "::")
}

// resourceStatuses are a report's resource_statuses as JSON: a status
// for each resource of cat (none without a catalog) and for the agent's
// own resources, all evaluated and in sync at time at, in catalog order;
// with how many there are and the evaluation time per resource type, for
// the time metrics. The JSON is written by hand: encoding/json takes
// several times the CPU, which the simulator shares with the broker.
func resourceStatuses(cat *servedCatalog, at time.Time) ([]byte, int, map[string]float64) {
	stamp := puppetTime(at)
	typeTimes := map[string]float64{}
	n := 0
	var b []byte
	written := map[string]bool{} // the refs of the agent's resource types the catalog has
	add := func(ref, typ, title string, file *string, line *int, tags []byte, path []byte, i int) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		// A plausible, deterministic evaluation time: 0.2 to 3 ms.
		et := float64(200+(i*7919)%2800) / 1e6
		typeTimes[strings.ToLower(typ)] += et
		b = appendString(b, ref)
		b = append(b, `:{"title":`...)
		b = appendString(b, title)
		b = append(b, `,"file":`...)
		if file == nil {
			b = append(b, "null"...)
		} else {
			b = appendString(b, *file)
		}
		b = append(b, `,"line":`...)
		if line == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, int64(*line), 10)
		}
		b = append(b, `,"resource":`...)
		b = appendString(b, ref)
		b = append(b, `,"resource_type":`...)
		b = appendString(b, typ)
		if p := defaultProviders[typ]; p != "" {
			b = append(b, `,"provider_used":`...)
			b = appendString(b, p)
		}
		b = append(b, `,"containment_path":`...)
		b = append(b, path...)
		b = append(b, `,"evaluation_time":`...)
		b = strconv.AppendFloat(b, et, 'f', -1, 64)
		b = append(b, `,"tags":`...)
		if len(tags) == 0 {
			tags = []byte("[]")
		}
		b = append(b, tags...)
		b = append(b, `,"time":`...)
		b = appendString(b, stamp)
		b = append(b, `,"failed":false,"failed_to_restart":false,"changed":false,"out_of_sync":false,"skipped":false,`+
			`"change_count":0,"out_of_sync_count":0,"events":[],"corrective_change":false}`...)
	}
	if cat != nil {
		b = make([]byte, 0, 4096+len(cat.Resources)*700)
		b = append(b, '{')
		paths := newContainment(cat)
		for i := range cat.Resources {
			r := &cat.Resources[i]
			if r.Exported || isContainer(r.Type) {
				continue
			}
			ref := r.ref()
			if r.Type == "Schedule" || r.Type == "Filebucket" {
				written[ref] = true
			}
			add(ref, r.Type, r.Title, r.File, r.Line, r.Tags, paths.of(ref), i)
		}
	} else {
		b = append(b, '{')
	}
	for i, ref := range agentResources {
		if written[ref] {
			continue
		}
		typ, rest, _ := strings.Cut(ref, "[")
		title := strings.TrimSuffix(rest, "]")
		tags := appendStrings(nil, []string{strings.ToLower(typ), title})
		add(ref, typ, title, nil, nil, tags, appendStrings(nil, []string{ref}), i)
	}
	return append(b, '}'), n, typeTimes
}

// containment gives Puppet's containment_path of a catalog's resources:
// their containers from the outermost (Stage[main]), classes by name, then
// the resource; each container's part is made once.
type containment struct {
	parent map[string]string // ref → the ref of its container (from the edges)
	label  map[string]string // container ref → its name in a path
	prefix map[string][]byte // container ref → `["Stage[main]","Name",`
}

func newContainment(cat *servedCatalog) *containment {
	c := &containment{parent: make(map[string]string, len(cat.Edges)), label: map[string]string{}, prefix: map[string][]byte{}}
	for _, e := range cat.Edges {
		c.parent[e.Target] = e.Source
	}
	for i := range cat.Resources {
		if r := &cat.Resources[i]; r.Type == "Class" {
			c.label[r.ref()] = r.Title
		}
	}
	return c
}

// of is ref's containment_path as JSON.
func (c *containment) of(ref string) []byte {
	p, ok := c.parent[ref]
	var b []byte
	if ok {
		b = append(b, c.prefixOf(p, 0)...)
	} else {
		b = append(b, '[')
	}
	b = appendString(b, ref)
	return append(b, ']')
}

// prefixOf is the open JSON array of the containment path down to and
// including container ref.
func (c *containment) prefixOf(ref string, depth int) []byte {
	if p, ok := c.prefix[ref]; ok {
		return p
	}
	var b []byte
	if p, ok := c.parent[ref]; ok && depth < 64 {
		b = append(b, c.prefixOf(p, depth+1)...)
	} else {
		b = append(b, '[')
	}
	label := ref
	if l, ok := c.label[ref]; ok {
		label = l
	}
	b = appendString(b, label)
	b = append(b, ',')
	c.prefix[ref] = b
	return b
}

// appendString appends s as a JSON string. Like Ruby's JSON (and unlike
// encoding/json) it leaves <, > and & as they are.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}
