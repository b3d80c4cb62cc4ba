package e2e

import (
	"encoding/json"
	"flag"
	"net/http"
	"sync"
	"testing"
	"time"
)

var flagJobAddresses = flag.Int("jobs.addresses", 2000, "counters TestJobMigrationKilledUnderLoad migrates (make test runs it again at 10,000 without the race detector; make soak at 10,000 with it)")

// TestJobMigrationKilledUnderLoad is the whole story of a migration on one
// runtime: counters under function load, a job that rewrites them with an
// expression while the function keeps incrementing some, the runtime
// SIGKILLed in the middle of the job and started again, the job going on
// by itself; then every counter holds seed + its increments + the
// migration once, the audit log one write of the job per counter, and the
// revert undoes the job as one, leaving the increments.
func TestJobMigrationKilledUnderLoad(t *testing.T) {
	t.Parallel()
	n := *flagJobAddresses
	e := jbStart(t)
	e.seed(n, jbID)

	const hot = 8
	stride := n / hot
	sent := make([]int, hot)
	load := func(stop chan struct{}) *sync.WaitGroup {
		return e.tickHot(stop, hot, stride, 50*time.Millisecond, sent)
	}

	stop := make(chan struct{})
	wg := load(stop)
	j := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-","state":"count"},"action":{"op":"set","expr":"value + 1000000"},"retries":50,"reason":"e2e migration"}`)
	e.await(j.ID, "a third done", 10*time.Minute, func(j jbJob) bool { return j.Counts.Scanned >= int64(n/3) })
	// The ticks stop around the kill so that each one's outcome is known;
	// the job's writes in flight are what the kill cuts.
	close(stop)
	wg.Wait()
	e.rt.kill()
	e.rt.start()
	stored := e.job(j.ID)
	if stored.Status != "running" && stored.Status != "done" {
		t.Fatalf("after SIGKILL and a restart the job is %s, want it running on", stored.Status)
	}
	stop = make(chan struct{})
	wg = load(stop)
	j = e.done(j.ID, 15*time.Minute)
	close(stop)
	wg.Wait()
	if j.Counts.Scanned != int64(n) || j.Counts.Changed != int64(n) || j.Counts.Conflicts != 0 || j.Counts.Failed != 0 {
		t.Fatalf("job counts %+v, want %d scanned and changed", j.Counts, n)
	}
	t.Logf("job %s: %+v; ticks %v", j.ID, j.Counts, sent)

	check := func(what string, migrated int64) {
		t.Helper()
		for i := range n {
			want := int64(i) + migrated
			if i%stride == 0 && i/stride < hot {
				want += int64(sent[i/stride])
			}
			if got, _ := e.get(jbID(i)); got != want {
				t.Fatalf("%s: %s = %d, want %d: a function write was lost or the job applied %s", what, jbID(i), got, want,
					map[bool]string{true: "twice", false: "not at all"}[got > want])
			}
		}
	}
	check("after the job", 1_000_000)
	w := e.writes(j.ID)
	if len(w) != n {
		t.Fatalf("the audit log holds writes of job %s to %d entries, want %d", j.ID, len(w), n)
	}
	for k, c := range w {
		if c != 1 {
			t.Fatalf("the audit log holds %d writes of job %s to %s, want 1", c, j.ID, k)
		}
	}

	// The revert undoes the job as one. A hot counter incremented since
	// the job wrote it no longer holds the job's value: it is listed, not
	// overwritten — no increment is lost. The others are back at their seed.
	r := e.api.expect(http.StatusCreated, http.MethodPost, "/jobs/"+j.ID+"/revert", "", "Statefun-Reason", "e2e: undo the migration")
	var rv jbJob
	if err := json.Unmarshal(r.body, &rv); err != nil {
		t.Fatal(err)
	}
	rv = e.done(rv.ID, 15*time.Minute)
	if rv.Kind != "revert" || rv.Counts.Changed+rv.Counts.Conflicts != int64(n) {
		t.Fatalf("revert: %+v, want %d entries changed or listed", rv, n)
	}
	listed := map[string]bool{}
	for _, c := range rv.Conflicts {
		listed[c.ID] = true
	}
	for i := range n {
		hotOne := i%stride == 0 && i/stride < hot
		want := int64(i)
		if hotOne {
			want += int64(sent[i/stride])
			if listed[jbID(i)] {
				want += 1_000_000 // changed by the function since: left alone
			}
		} else if listed[jbID(i)] {
			t.Fatalf("the revert listed %s, which nothing wrote after the job", jbID(i))
		}
		if got, _ := e.get(jbID(i)); got != want {
			t.Fatalf("after the revert %s = %d, want %d", jbID(i), got, want)
		}
	}
}
