// Package farmtest holds one contract suite per contract of package farm.
// A driver's tests call the suite with a constructor for fresh, empty
// instances:
//
//	func TestContentStore(t *testing.T) {
//		farmtest.TestContentStore(t, func(t *testing.T) farm.ContentStore { return memstore.New() })
//	}
//
// Each property of a contract is a subtest, so a failing driver shows which
// promise it breaks. The suites check what the contract docs in package farm
// promise, read strictly; a subtest checking what a doc does not state is a
// gap in that doc, since a driver author learns the promises from the doc,
// not from the suite. Promises only some drivers make are selected by
// capability flags (QueueCaps).
package farmtest
