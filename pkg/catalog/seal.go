package catalog

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Seal gives a compiled catalog its farm identity and returns it with its
// content digest.
//
// Puppet's default config_version is the compile time, so two compiles of
// the same node, code and facts would differ; Seal replaces a numeric
// version with the code_id (a string version, from an environment's
// config_version script, is kept). catalog_uuid is derived from the
// content, so equal catalogs are equal bytes. The content digest is taken
// with code_id, version and catalog_uuid blanked: two catalogs with the same
// content digest make an agent do the same thing, whatever code snapshot
// they came from.
func Seal(data []byte, codeID string) ([]byte, farm.Digest, error) {
	c, err := Parse(data)
	if err != nil {
		return nil, "", fmt.Errorf("seal catalog: %w", err)
	}
	version := c.Version
	if isNumber(version) || len(bytes.TrimSpace(version)) == 0 || string(version) == "null" {
		v, _ := json.Marshal(codeID)
		version = v
	}
	c.CodeID, c.Version, c.CatalogUUID = "", json.RawMessage(`null`), ""
	blank, err := c.Marshal()
	if err != nil {
		return nil, "", fmt.Errorf("seal catalog %s: %w", c.Name, err)
	}
	content := farm.DigestOf(blank)
	c.CodeID, c.Version, c.CatalogUUID = codeID, version, UUIDOf(content)
	out, err := c.Marshal()
	if err != nil {
		return nil, "", fmt.Errorf("seal catalog %s: %w", c.Name, err)
	}
	return out, content, nil
}

func isNumber(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && (b[0] == '-' || (b[0] >= '0' && b[0] <= '9'))
}

// UUIDOf is the catalog_uuid Seal gives a catalog with this content
// digest: its first 16 bytes as an RFC 9562 version 8 (custom) UUID.
func UUIDOf(d farm.Digest) string {
	b, _ := hex.DecodeString(string(d[:32]))
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
