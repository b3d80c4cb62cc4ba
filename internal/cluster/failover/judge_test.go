package failover

import (
	"slices"
	"testing"
	"time"
)

// at is a point on the judge's time line, in milliseconds from its start.
func at(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }

func wantDue(t *testing.T, j *judge, ms int, want ...string) {
	t.Helper()
	if got := j.due(at(ms)); !slices.Equal(got, want) {
		t.Errorf("due at %d ms: %v, want %v", ms, got, want)
	}
}

// A peer is due once its probes have failed for the down-after time, at
// least two of them; one that answers starts over.
func TestJudgeDownAfterUnansweredProbes(t *testing.T) {
	j := newJudge(2 * time.Second)
	j.probed("d", at(0), true) // a peer that answers: this node is not cut off
	j.probed("b", at(0), true)
	if began := j.probed("b", at(500), false); !began {
		t.Error("the first failed probe did not begin a run")
	}
	if began := j.probed("b", at(1000), false); began {
		t.Error("the second failed probe began a run again")
	}
	wantDue(t, j, 2499)
	j.probed("b", at(2500), false)
	wantDue(t, j, 2500, "b")

	// One probe that hung for the whole time is not enough.
	j.probed("c", at(0), false)
	wantDue(t, j, 5000, "b")
	j.probed("c", at(5000), false)
	wantDue(t, j, 5000, "b", "c")

	// An answer ends the run; the next failure starts a new one.
	j.probed("b", at(5100), true)
	wantDue(t, j, 5100, "c")
	j.probed("b", at(5600), false)
	j.probed("b", at(6000), false)
	wantDue(t, j, 7000, "c")
	wantDue(t, j, 7600, "b", "c")
}

// A peer removed in a run is not due again until it has answered: a node
// that rejoins the group while it still answers nobody keeps its
// partitions rather than being removed in a loop. Dropping out of the
// owners while failing counts as its removal (another node removed it).
func TestJudgeRemovesOncePerRun(t *testing.T) {
	j := newJudge(time.Second)
	j.probed("d", at(0), true)
	j.probed("b", at(0), false)
	j.probed("b", at(1000), false)
	wantDue(t, j, 1000, "b")
	j.markRemoved("b")
	wantDue(t, j, 1000)

	// It owns no partition for a while, then rejoins and is probed again,
	// still failing: not due.
	if j.keep(map[string]string{"d": "u"}) {
		t.Error("keep reported a peer removed by another node, but this node removed it")
	}
	j.probed("b", at(3000), false)
	j.probed("b", at(9000), false)
	wantDue(t, j, 9000)
	// It answers: the run is over, and a new one may end in a removal.
	j.probed("b", at(9500), true)
	j.probed("b", at(10000), false)
	j.probed("b", at(11000), false)
	wantDue(t, j, 11000, "b")

	// Another node removed c while this one still waited: c dropped out
	// of the owners in a run, so it is not removed again when it returns
	// unanswering.
	j.probed("c", at(10000), false)
	if !j.keep(map[string]string{"b": "u", "d": "u"}) {
		t.Error("keep did not report c, removed by another node while it failed")
	}
	j.probed("c", at(12000), false)
	j.probed("c", at(13000), false)
	wantDue(t, j, 13000, "b")
}

// Progress seen in Kafka starts the run's clock again.
func TestJudgeProgressRestartsTheRun(t *testing.T) {
	j := newJudge(2 * time.Second)
	j.probed("b", at(0), false)
	j.probed("b", at(1000), false)
	j.progressed("b", at(2000))
	wantDue(t, j, 3999)
	j.probed("b", at(4000), false)
	wantDue(t, j, 4000, "b")
	// Progress of a peer that answers changes nothing.
	j.probed("c", at(0), true)
	j.progressed("c", at(100))
	if r := j.peers["c"]; !r.since.IsZero() {
		t.Errorf("progress of an answering peer began a run: %+v", r)
	}
}

// A node that reaches none of two or more peers removes none: it is more
// likely the one cut off. With one peer there is nobody to compare with.
func TestJudgeCutOffRemovesNobody(t *testing.T) {
	j := newJudge(time.Second)
	for _, ms := range []int{0, 1000} {
		j.probed("b", at(ms), false)
		j.probed("c", at(ms), false)
	}
	if !j.cutOff() {
		t.Error("every peer fails, yet not cut off")
	}
	wantDue(t, j, 2000)
	j.probed("c", at(2000), true)
	if j.cutOff() {
		t.Error("a peer answers, yet cut off")
	}
	wantDue(t, j, 2000, "b")

	lone := newJudge(time.Second)
	lone.probed("b", at(0), false)
	lone.probed("b", at(1000), false)
	if lone.cutOff() {
		t.Error("one peer failing counts as cut off")
	}
	wantDue(t, lone, 1000, "b")
}
