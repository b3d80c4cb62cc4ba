package session

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A node whose every commit Kafka refuses (each EndTxn commit answered
// UNKNOWN_SERVER_ERROR, which the client ends as an abort) stops after
// its give-up time with an error wrapping ErrGaveUp that says what was
// refused, instead of aborting for ever.
func TestGivesUpWhenKafkaRefusesItsCommits(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		h.refuseEndTxnCommits(func(int64) bool { return true })
		// A short give-up time: on the bubble's clock the brokers answer at
		// once, so the node aborts about one transaction per fake
		// millisecond (each rebuilding its partitions), and a second of
		// them would cost a minute of CPU under the race detector.
		a := h.startWith("a", t.TempDir(), func(c *Config) { c.Cluster.GiveUpAfter = 50 * time.Millisecond }, nil)
		h.eventually("a to own every partition", 30*time.Second, func() bool { return len(a.e.owned()) == testP })
		h.produce(8, 0)
		var err error
		select {
		case err = <-a.done:
		case <-time.After(30 * time.Second):
			t.Fatal("the node did not give up within 30s of refused commits")
		}
		a.cancel()
		a.cancel = nil
		if cerr := a.db.Close(); cerr != nil {
			t.Error(cerr)
		}
		if !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "aborted by a rebalance or refused by Kafka") {
			t.Fatalf("Run: %v; want an error wrapping ErrGaveUp saying why", err)
		}
		if got := a.metric(t, "statefun_cluster_txn_commits_total"); got != 0 {
			t.Errorf("%v transactions committed, want none", got)
		}
		if got := a.metric(t, "statefun_cluster_txn_aborts_total"); got < 2 {
			t.Errorf("%v transactions aborted before giving up, want a few", got)
		}
		t.Log(err)
	})
}
