package session

import (
	"testing"
	"time"
)

// Work commits as soon as it waits, not at the end of a commit interval
// (cycle.Machine.PollFor): with a 10 s interval, a record that hops
// through four partitions — each hop a message produced in one
// transaction, visible to its owner read_committed only once that
// commits, then its arrival committed by the next — and a request that
// commits no offsets are durable within milliseconds of the bubble's
// clock, where one interval per transaction would take 10 s each.
func TestWorkDoesNotWaitForTheInterval(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		a := h.startWith("a", t.TempDir(), func(c *Config) { c.Cluster.CommitInterval = 10 * time.Second }, nil)
		h.eventually("node a ready with every partition", 60*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		h.settle(time.Second)

		start := time.Now()
		h.produce(1, 3)
		h.eventually("4 arrivals", 60*time.Second, func() bool { return totalArrivals(a) == 4 })
		if took := time.Since(start); took > 200*time.Millisecond {
			t.Errorf("a record's 4 hops took %v with a 10 s commit interval; want each committed at once (< 200 ms in all)", took)
		} else {
			t.Logf("4 hops in %v", took)
		}

		h.settle(time.Second)
		done := make(chan error, 1)
		start = time.Now()
		if !a.e.probe(0, "cadence", done) {
			t.Fatal("partition 0 is not served")
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the probe was not durable after 30 s")
		}
		if took := time.Since(start); took > 50*time.Millisecond {
			t.Errorf("a request without offsets was durable after %v with a 10 s commit interval; want at once (< 50 ms)", took)
		}
		a.stop(t)
		h.checkExactlyOnce(4)
	})
}
