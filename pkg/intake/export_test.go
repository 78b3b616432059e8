package intake

import "testing"

// CountDocumentReads counts the upload documents Submit reads
// (facts.Upload.Document) until the test ends.
func CountDocumentReads(t testing.TB) *int {
	t.Helper()
	n := 0
	testHookDocument = func() { n++ }
	t.Cleanup(func() { testHookDocument = nil })
	return &n
}
