package stateclient

// SetMaxAuditPage makes Audit read pages of n records, for a test of its
// paging over few records; the returned func restores it.
func SetMaxAuditPage(n int) func() {
	old := maxAuditPage
	maxAuditPage = n
	return func() { maxAuditPage = old }
}
