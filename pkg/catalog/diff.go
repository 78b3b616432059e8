package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/compilefarm/compilefarm/internal/canonjson"
)

// Change kinds in a Diff.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// ResourceChange is one resource that differs between two catalogs.
type ResourceChange struct {
	Ref    string `json:"ref"` // Type[title]
	Type   string `json:"type"`
	Change string `json:"change"` // added, removed or changed
	// Params lists the changed parameters of a changed resource: name ->
	// [old, new] (null where absent). File content served from the code
	// snapshot shows as the pseudo-parameter "source content".
	Params map[string][2]json.RawMessage `json:"params,omitempty"`
}

// Diff is the resource-level difference between two catalogs.
type Diff struct {
	From      string           `json:"from_code_id"`
	To        string           `json:"to_code_id"`
	Resources []ResourceChange `json:"resources"`
}

// ByType counts changed resources per type.
func (d Diff) ByType() map[string]int {
	out := map[string]int{}
	for _, r := range d.Resources {
		out[r.Type]++
	}
	return out
}

// Compare returns the resource-level difference from catalog a to b. It
// ignores what has no effect on the node: catalog identity (version,
// code_id, catalog_uuid), resource tags and where resources were declared
// (file, line), and parameter order. Parameters are compared as JSON
// values; a file served from a puppet:/// source changes when its inlined
// checksum does.
func Compare(a, b []byte) (Diff, error) {
	ca, err := Parse(a)
	if err != nil {
		return Diff{}, fmt.Errorf("compare catalogs: old: %w", err)
	}
	cb, err := Parse(b)
	if err != nil {
		return Diff{}, fmt.Errorf("compare catalogs: new: %w", err)
	}
	d := Diff{From: ca.CodeID, To: cb.CodeID}
	ra, err := resourceParams(ca)
	if err != nil {
		return Diff{}, err
	}
	rb, err := resourceParams(cb)
	if err != nil {
		return Diff{}, err
	}
	for ref, pa := range ra {
		pb, ok := rb[ref]
		if !ok {
			d.Resources = append(d.Resources, ResourceChange{Ref: ref, Type: pa.typ, Change: Removed})
			continue
		}
		if ch := paramChanges(pa.params, pb.params); len(ch) > 0 {
			d.Resources = append(d.Resources, ResourceChange{Ref: ref, Type: pa.typ, Change: Changed, Params: ch})
		}
	}
	for ref, pb := range rb {
		if _, ok := ra[ref]; !ok {
			d.Resources = append(d.Resources, ResourceChange{Ref: ref, Type: pb.typ, Change: Added})
		}
	}
	sort.Slice(d.Resources, func(i, j int) bool { return d.Resources[i].Ref < d.Resources[j].Ref })
	return d, nil
}

type resourceState struct {
	typ    string
	params map[string]json.RawMessage
}

// resourceParams maps each resource reference to its parameters, with
// the inlined checksums of file sources added as "source content".
func resourceParams(c *Catalog) (map[string]resourceState, error) {
	files, err := c.FileMetadata()
	if err != nil {
		return nil, err
	}
	trees, err := c.RecursiveFileMetadata()
	if err != nil {
		return nil, err
	}
	out := make(map[string]resourceState, len(c.Resources))
	for i := range c.Resources {
		r := &c.Resources[i]
		params := map[string]json.RawMessage{}
		if len(r.Parameters) > 0 && string(r.Parameters) != "null" {
			if err := json.Unmarshal(r.Parameters, &params); err != nil {
				return nil, fmt.Errorf("parameters of %s: %w", r.Ref(), err)
			}
		}
		if r.Exported {
			params["@@exported"] = json.RawMessage("true")
		}
		if r.Type == "File" {
			if md, ok := files[r.Title]; ok {
				b, _ := json.Marshal(md.Checksum.Value)
				params["source content"] = b
			}
			if tree, ok := trees[r.Title]; ok {
				sums := map[string]string{}
				for src, entries := range tree {
					for _, e := range entries {
						sums[src+" "+e.RelativePath] = e.Checksum.Value
					}
				}
				b, _ := json.Marshal(sums)
				params["source content"] = b
			}
		}
		out[r.Ref()] = resourceState{typ: r.Type, params: params}
	}
	return out, nil
}

func paramChanges(a, b map[string]json.RawMessage) map[string][2]json.RawMessage {
	out := map[string][2]json.RawMessage{}
	null := json.RawMessage("null")
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			out[k] = [2]json.RawMessage{va, null}
		} else if !bytes.Equal(canonjson.Of(va), canonjson.Of(vb)) {
			out[k] = [2]json.RawMessage{va, vb}
		}
	}
	for k, vb := range b {
		if _, ok := a[k]; !ok {
			out[k] = [2]json.RawMessage{null, vb}
		}
	}
	return out
}
