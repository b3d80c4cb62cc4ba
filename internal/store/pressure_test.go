package store

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Between two sweeps (an hour apart here), a burst of writes does not take
// a space far past its count limit: 2,000 audit records in batches of 10,
// with a limit of 100, leave at most a tenth more once the sweeps they
// started have run — not the 2,000 an hourly sweep would find.
func TestCountLimitsHoldBetweenSweeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, err := Open("db", Options{FS: vfs.NewMem(), Logger: quietLogger{}, SweepInterval: time.Hour,
			Retention: Retention{AuditCount: 100, ReceiptCount: 50}})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		now := time.Now()
		highest := 0
		for n := 0; n < 2000; n += 10 {
			b := db.NewBatch()
			for i := range 10 {
				b.PutAudit(auditRec(now.Add(time.Duration(n+i)*time.Millisecond), n+i, "a", "who", "s"))
			}
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the sweep this batch may have started ends
			highest = max(highest, countSpace(t, db, spaceAudit))
		}
		if got := countSpace(t, db, spaceAudit); got > 110 {
			t.Errorf("%d audit records after the burst, limit 100; want at most 110", got)
		}
		if highest > 110 {
			t.Errorf("the audit log reached %d records during the burst, limit 100; want at most 110", highest)
		}
		// The index entries go with their records.
		if got := countSpace(t, db, spaceAuditWho); got != countSpace(t, db, spaceAudit) {
			t.Errorf("%d index entries by principal for %d records", got, countSpace(t, db, spaceAudit))
		}
	})
}
