package facts

import (
	"bytes"
	"hash/maphash"
	"strconv"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Upload is a node's facts as its agent sent them: the form body of a
// catalog request (POST /puppet/v3/catalog/<name>, whose facts parameter
// is the JSON facts document URL-encoded twice, beside facts_format,
// environment and the rest), or a facts document (PUT
// /puppet/v3/facts/<name>). Its methods read it in steps, each costlier
// than the last: RawKey decodes nothing, Selected only the facts it is
// asked for, Document the whole document. Nothing is cached: each call
// reads the body again, so a caller that decodes the document at most
// once calls Document at most once.
//
// An Upload refers to the body it was made from and must not be used
// once that body is reused (the front door recycles request bodies when
// its handler returns). Nothing its methods return refers to the body:
// what a caller keeps of them outlives it.
//
// The zero Upload has no facts: its RawKey is "", Selected does not
// handle it, and Document returns nil.
type Upload struct {
	body []byte
	raw  []byte // the facts as sent: the form's facts parameter, still encoded, or the document
	kind uploadKind
}

// uploadKind is how an Upload's body carries its facts.
type uploadKind uint8

const (
	noFacts uploadKind = iota
	catalogForm
	jsonDocument
)

// CatalogForm is the facts of a catalog request, from its form body
// (application/x-www-form-urlencoded); ok is false when the form has no
// facts parameter (an agent asking for its catalog without sending facts).
// Nothing of the form is checked until the facts are read.
func CatalogForm(body []byte) (up Upload, ok bool) {
	start, end, ok := formParam(body, "facts")
	if !ok {
		return Upload{}, false
	}
	return Upload{body: body, raw: body[start:end], kind: catalogForm}, true
}

// JSONDocument is the facts of a facts document (JSON, as Decode reads
// it), such as the body of PUT /puppet/v3/facts. Nothing of it is checked
// until the facts are read.
func JSONDocument(body []byte) Upload {
	return Upload{body: body, raw: body, kind: jsonDocument}
}

// IsZero reports whether u is the zero Upload, which has no facts.
func (u Upload) IsZero() bool { return u.kind == noFacts }

// rawKeySeed seeds RawKey: random per process.
var rawKeySeed = maphash.MakeSeed()

// RawKey identifies the facts as they were sent, within this process:
// uploads with equal keys are, in effect, byte for byte the same facts
// (of a form, the facts parameter as encoded, whatever the rest of the
// form holds, such as its transaction_uuid), so a caller that has
// judged the one can know the other unchanged without decoding it. It is
// a 64-bit maphash whose seed no agent knows, at a tenth of SHA-256's
// cost, named by the upload's kind: a form's facts parameter and a
// document of the same bytes are not the same facts. "" for the zero
// Upload.
func (u Upload) RawKey() farm.Digest {
	var prefix string
	switch u.kind {
	case catalogForm:
		prefix = "maphash-form:"
	case jsonDocument:
		prefix = "maphash-json:"
	default:
		return ""
	}
	b := make([]byte, 0, len("maphash-form:")+16)
	b = append(b, prefix...)
	b = strconv.AppendUint(b, maphash.Bytes(rawKeySeed, u.raw), 16)
	return farm.Digest(b)
}

// Document returns the facts document (JSON, for Decode). From a form, it
// is decoded as ParseCatalogForm decodes it, with its errors (a body that
// is no form, a facts_format other than JSON, facts that are not
// URL-encoded twice); a document is returned as a copy. Each call decodes
// it again.
func (u Upload) Document() ([]byte, error) {
	switch u.kind {
	case catalogForm:
		req, err := ParseCatalogForm(u.body)
		if err != nil {
			return nil, err
		}
		return req.Facts, nil
	case jsonDocument:
		return bytes.Clone(u.body), nil
	}
	return nil, nil
}

// Selected returns the values of the facts sel selects, as
// DecodeOnly(certname, doc, sel) returns them for doc the upload's
// Document, without Document: from a form, read from the facts as they
// are still encoded (DecodeOnlyEncoded), so that an upload that changes
// none of them is never unescaped whole. handled is false when it cannot
// say (a form read otherwise than DecodeOnlyEncoded reads it, or that is
// malformed; a nil sel; the zero Upload): the caller then decodes
// Document to know. When handled, err is DecodeOnly's on the document.
func (u Upload) Selected(certname string, sel *Selection) (values map[string]any, handled bool, err error) {
	if sel == nil {
		return nil, false, nil
	}
	var d Document
	switch u.kind {
	case catalogForm:
		d, handled, err = catalogFormOnly(certname, u.body, sel)
	case jsonDocument:
		d, err = DecodeOnly(certname, u.body, sel)
		handled = true
	}
	return d.Values, handled, err
}
