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
// promise, read strictly, plus a few behaviours the farm relies on that the
// docs leave implicit (each subtest's comment says which).
package farmtest
