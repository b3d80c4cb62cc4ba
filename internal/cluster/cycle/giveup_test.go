package cycle

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
		if warn, err := r.aborted(at(ms), ProduceRefused); warn != "" || err != nil {
			t.Fatalf("a refused record counted toward giving up: %q, %v", warn, err)
		}
	}
	var warns []int
	var gaveUp error
	ms := 0
	for ; ms <= 20_000 && gaveUp == nil; ms += 100 {
		reason := Group
		if ms%1000 == 0 {
			reason = Fenced
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
	if warn, err := r.aborted(at(30_000), Group); warn != "" || err != nil {
		t.Errorf("after a commit, the first refusal: %q, %v; want a fresh clock", warn, err)
	}
	if _, err := r.aborted(at(39_900), Group); err != nil {
		t.Errorf("9.9 s after the clock started again: %v", err)
	}

	never := giveUp{after: -1}
	never.aborted(at(0), Group)
	warn, err := never.aborted(at(60_000), Group)
	if err != nil || !strings.Contains(warn, "never gives up") {
		t.Errorf("with a negative give-up time, a minute of refusals: %q, %v; want a warning only", warn, err)
	}
}
