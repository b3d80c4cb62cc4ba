package session

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func totalArrivals(ns ...*node) int64 {
	var n int64
	for _, x := range ns {
		n += x.e.arrivals.Load()
	}
	return n
}

func totalTicks(ns ...*node) int64 {
	var n int64
	for _, x := range ns {
		n += x.e.ticks.Load()
	}
	return n
}

// One node serves every partition: the records it consumes, the messages
// it sends to other partitions and the ticks it makes count once each, in
// the changelog and in the output, and it reports ready once restored.
func TestOneNodeCountsOnce(t *testing.T) {
	h := newHarness(t)
	a := h.start("a", t.TempDir())
	eventually(t, "node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
	h.produce(200, 1)
	for p := range testP {
		a.e.tick(p)
	}
	eventually(t, "400 increments by arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 400 })
	eventually(t, "4 ticks", 20*time.Second, func() bool { return totalTicks(a) == 4 })
	a.stop(t)
	h.checkExactlyOnce(404)
}

// Uncommitted changes never reach the store: a transaction whose EndTxn
// the brokers refuse is aborted, its overlay never written to Pebble
// (though its changelog record was produced, in the aborted transaction),
// its request fails with ErrAborted, and the partition is rebuilt from the
// store. The next transaction commits normally.
func TestAbortLeavesNoTraceInStore(t *testing.T) {
	h := newHarness(t)
	var armed atomic.Bool
	h.failEndTxnCommit(&armed)
	a := h.start("a", t.TempDir())
	eventually(t, "node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
	h.produce(40, 0)
	eventually(t, "40 arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 40 })
	assigns := a.e.assigns.Load()

	armed.Store(true)
	done := make(chan error, 1)
	if !a.e.probe(1, "aborted", done) {
		t.Fatal("partition 1 not served")
	}
	err := <-done
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("the probe's request failed with %v, want ErrAborted", err)
	}
	if _, ok, err := a.db.GetState(counterAddr(1), "probe/aborted"); err != nil || ok {
		t.Fatalf("after the abort the store holds the aborted overlay's key (found %v, err %v)", ok, err)
	}
	// The aborted record did reach the changelog, so it is the abort,
	// not a missing produce, that keeps it out.
	inLog := func(committed bool) bool {
		for _, r := range h.readTopic(testApp+"-changelog", committed) {
			if r.Partition == 1 && bytes.Contains(r.Key, []byte("probe/aborted")) {
				return true
			}
		}
		return false
	}
	if !inLog(false) || inLog(true) {
		t.Fatalf("the aborted record: read_uncommitted sees it %v (want true), read_committed %v (want false)", inLog(false), inLog(true))
	}
	eventually(t, "partition 1 rebuilt after the abort", 20*time.Second, func() bool { return a.e.assigns.Load() > assigns && a.s.Ready() })

	if !a.e.probe(1, "committed", done) {
		t.Fatal("partition 1 not served after its rebuild")
	}
	if err := <-done; err != nil {
		t.Fatalf("the second probe: %v", err)
	}
	if _, ok, err := a.db.GetState(counterAddr(1), "probe/committed"); err != nil || !ok {
		t.Fatalf("after the commit the store lacks the committed key (found %v, err %v)", ok, err)
	}
	h.produce(40, 0)
	eventually(t, "80 arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 80 })
	a.stop(t)
	h.checkExactlyOnce(80)
}
