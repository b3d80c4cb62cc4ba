package cycle

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// ErrGaveUp is wrapped by the error of Result.GiveUp (and the session's Run) when Kafka refused this
// node's commits for Config.Cluster's give-up time, none committing: the
// node gives its partitions up (the caller removes it from the group, so
// that other nodes serve them) and stops.
var ErrGaveUp = errors.New("cluster: gave up: Kafka refuses this node's commits")

// giveUp counts the transactions aborted since the last commit, to tell
// when this node should give its partitions up (docs/explanation/cluster.md, "What
// each failure costs"). It reads no clock: now arrives with each call.
//
// Only aborts where Kafka refused the commit itself count: a rebalance or
// refused offset commit or EndTxn ("group"), the membership check
// ("fence"). A transaction whose content was refused (a record, an
// encoding) would be refused on any node, so moving its partition would
// only move the failure; those are logged where they arise, as before.
type giveUp struct {
	after  time.Duration // negative: never give up
	since  time.Time     // first refused commit since the last commit; zero after a commit
	counts map[Reason]int
	logged time.Time // last warning
}

// refusalWarnEvery spaces the warnings about commits refused in a row.
const refusalWarnEvery = 5 * time.Second

// committed forgets the refusals: a transaction committed.
func (r *giveUp) committed() {
	r.since = time.Time{}
	clear(r.counts)
	r.logged = time.Time{}
}

// aborted records an aborted transaction and its reason. It returns a
// warning to log (at most one every refusalWarnEvery while commits keep
// being refused), and, once they have been refused for the give-up time,
// the error that stops the session.
func (r *giveUp) aborted(now time.Time, reason Reason) (warn string, err error) {
	if !reason.countsTowardGiveUp() {
		return "", nil
	}
	if r.counts == nil {
		r.counts = map[Reason]int{}
	}
	r.counts[reason]++
	if r.since.IsZero() {
		r.since, r.logged = now, now
		return "", nil
	}
	stuck := now.Sub(r.since)
	if r.after >= 0 && stuck >= r.after {
		return "", fmt.Errorf("%w: no transaction committed for %v, %s; this node leaves the group so that other nodes serve its partitions, and stops (if no node can commit, look at the brokers: their logs, the transaction coordinator, the ACLs of the transactional id)",
			ErrGaveUp, stuck.Round(time.Millisecond), r.describe())
	}
	if now.Sub(r.logged) < refusalWarnEvery {
		return "", nil
	}
	r.logged = now
	gives := "it never gives up (--cluster-give-up-after is negative)"
	if r.after >= 0 {
		gives = fmt.Sprintf("it gives its partitions up after %v", r.after)
	}
	return fmt.Sprintf("cluster: no transaction committed for %v, %s; %s",
		stuck.Round(time.Millisecond), r.describe(), gives), nil
}

// describe says which aborts were counted.
func (r *giveUp) describe() string {
	var parts []string
	for _, reason := range slices.Sorted(maps.Keys(r.counts)) {
		what := "aborted by a rebalance or refused by Kafka (offset commit or EndTxn)"
		if reason == Fenced {
			what = "aborted because the group no longer knew this node as the member it was"
		}
		parts = append(parts, fmt.Sprintf("%d %s", r.counts[reason], what))
	}
	return strings.Join(parts, ", ")
}
