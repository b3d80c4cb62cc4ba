package failover

import (
	"slices"
	"time"
)

// judge is the detector's decision core: it is told the outcome of every
// probe of a peer and asked which peers are due for removal from the
// group. It does no I/O and reads no clock (time arrives with each call),
// so its tests step it through time.
//
// A peer's run of failures starts with the first probe it leaves
// unanswered and ends with the first it answers. Within a run the peer is
// removed at most once: a node that the group took back while it still
// answers nobody (it reaches Kafka, not its peers) keeps its partitions
// until it answers again or its session times out, rather than being
// removed and rejoining in a loop.
type judge struct {
	downAfter time.Duration
	peers     map[string]*peerRun // the peers probed now
	// removed are the nodes removed in a run that has not ended: a node
	// drops out of peers once it owns no partition, and must not start a
	// fresh run when the group gives it partitions again.
	removed map[string]bool
}

// peerRun is what the judge knows of one peer.
type peerRun struct {
	since  time.Time // start of the first failed probe of the run; zero while the peer answers
	failed int       // failed probes in the run
}

func newJudge(downAfter time.Duration) *judge {
	return &judge{downAfter: downAfter, peers: map[string]*peerRun{}, removed: map[string]bool{}}
}

// probed records the outcome of a probe of node that started at start.
// It reports whether this failure began a run (the detector then notes how
// the node stands in Kafka, to tell later whether it made progress).
func (j *judge) probed(node string, start time.Time, ok bool) (began bool) {
	r := j.peers[node]
	if r == nil {
		r = &peerRun{}
		j.peers[node] = r
	}
	if ok {
		*r = peerRun{}
		delete(j.removed, node)
		return false
	}
	r.failed++
	if r.since.IsZero() {
		r.since = start
		return true
	}
	return false
}

// due returns, sorted, the peers that have left every probe unanswered for
// downAfter or longer (at least two probes) and were not removed in this
// run. It returns none when this node is cut off (see cutOff).
func (j *judge) due(now time.Time) []string {
	if j.cutOff() {
		return nil
	}
	var out []string
	for node, r := range j.peers {
		if !r.since.IsZero() && !j.removed[node] && r.failed >= 2 && now.Sub(r.since) >= j.downAfter {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// cutOff reports whether every peer fails and there are at least two: a
// node that reaches none of its peers is more likely the one cut off, and
// removing them all would move every partition to it.
func (j *judge) cutOff() bool {
	return len(j.peers) >= 2 && j.failing() == len(j.peers)
}

// failing returns the number of peers in a run of failures.
func (j *judge) failing() int {
	n := 0
	for _, r := range j.peers {
		if !r.since.IsZero() {
			n++
		}
	}
	return n
}

// progressed starts node's run again at now: Kafka showed it (or a new
// process with its node id) at work, so it gets downAfter again before it
// is judged down.
func (j *judge) progressed(node string, now time.Time) {
	if r := j.peers[node]; r != nil && !r.since.IsZero() {
		r.since, r.failed = now, 1
	}
}

// markRemoved records that node was removed from the group (by this node
// or another) in its current run.
func (j *judge) markRemoved(node string) { j.removed[node] = true }

// keep stops probing the peers not in nodes: they own no partition any
// more, or their admin URL is not known (a node that withdrew its member
// record stopped on purpose and keeps its partitions for its restart). A
// peer that drops out in a run of failures was removed from the group (by
// another node, or its session timed out): that counts as its removal in
// this run, and keep reports whether there was one.
func (j *judge) keep(nodes map[string]string) (droppedDown bool) {
	for node, r := range j.peers {
		if _, ok := nodes[node]; !ok {
			if !r.since.IsZero() && !j.removed[node] {
				j.removed[node] = true
				droppedDown = true
			}
			delete(j.peers, node)
		}
	}
	return droppedDown
}
