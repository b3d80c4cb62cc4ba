package session

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The give-up clock: only refused commits count (a group or fence
// abort), it starts at the first one after a commit, it warns at most
// every five seconds while commits keep being refused, and it stops the
// session once they have been refused for the give-up time; a commit
// resets it, and a negative give-up time only warns.
func TestRefusalsGiveUpAfterTheirTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := giveUp{after: 10 * time.Second}
	for ms := 0; ms < 20_000; ms += 100 {
		if warn, err := r.aborted(at(ms), "produce"); warn != "" || err != nil {
			t.Fatalf("a refused record counted toward giving up: %q, %v", warn, err)
		}
	}
	var warns []int
	var gaveUp error
	ms := 0
	for ; ms <= 20_000 && gaveUp == nil; ms += 100 {
		reason := "group"
		if ms%1000 == 0 {
			reason = "fence"
		}
		warn, err := r.aborted(at(ms), reason)
		if warn != "" {
			warns = append(warns, ms)
		}
		gaveUp = err
	}
	if want := []int{5000}; len(warns) != 1 || warns[0] != want[0] {
		// 10000 gives up rather than warn.
		t.Errorf("warned at %v ms, want %v", warns, want)
	}
	if !errors.Is(gaveUp, ErrGaveUp) || ms-100 != 10_000 {
		t.Fatalf("at %d ms: %v; want ErrGaveUp at 10000 ms", ms-100, gaveUp)
	}
	for _, want := range []string{"no transaction committed for 10s", "90 aborted by a rebalance or refused by Kafka", "11 aborted because the group no longer knew this node", "leaves the group"} {
		if !strings.Contains(gaveUp.Error(), want) {
			t.Errorf("%q does not say %q", gaveUp, want)
		}
	}

	r.committed()
	if warn, err := r.aborted(at(30_000), "group"); warn != "" || err != nil {
		t.Errorf("after a commit, the first refusal: %q, %v; want a fresh clock", warn, err)
	}
	if _, err := r.aborted(at(39_900), "group"); err != nil {
		t.Errorf("9.9 s after the clock started again: %v", err)
	}

	never := giveUp{after: -1}
	never.aborted(at(0), "group")
	warn, err := never.aborted(at(60_000), "group")
	if err != nil || !strings.Contains(warn, "never gives up") {
		t.Errorf("with a negative give-up time, a minute of refusals: %q, %v; want a warning only", warn, err)
	}
}

// A node whose every commit Kafka refuses (each EndTxn commit answered
// UNKNOWN_SERVER_ERROR, which the client ends as an abort) stops after
// its give-up time with an error wrapping ErrGaveUp that says what was
// refused, instead of aborting for ever.
func TestGivesUpWhenKafkaRefusesItsCommits(t *testing.T) {
	h := newHarness(t)
	h.refuseEndTxnCommits(func(int64) bool { return true })
	a := h.startWith("a", t.TempDir(), func(c *Config) { c.Cluster.GiveUpAfter = time.Second }, nil)
	eventually(t, "a to own every partition", 30*time.Second, func() bool { return len(a.e.owned()) == testP })
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
}
