// Package kafkatxn is what every transactional producer of the runtime
// does before it ends a Kafka transaction with franz-go: wait until the
// client has settled the partitions of the topics the transaction
// produced to.
//
// Why: the first records a franz-go client is given for a topic it has not
// produced to before wait until it learns the topic's partitions; it then
// hands them to their partitions and only afterwards publishes those
// partitions where the rest of the client looks them up. Handed over, a
// record can be produced, its partition marked as part of the
// transaction, and Flush return, before that publication. EndTransaction
// finds the transaction's partitions by that lookup: seeing none marked,
// it takes the transaction for empty, ends it as an abort (or, on brokers
// without KIP-890, not at all, leaving it to the transaction timeout), and
// returns nil. A commit is then reported that never happened: the first
// transaction after a start, a state API write answered committed or a
// batch of Kafka egress records taken for delivered, silently gone. The
// wait it takes to avoid is a few instructions on the client's metadata
// goroutine, so Await almost never waits at all.
package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics collects the topics a transaction produces to, each once. A
// transaction produces to a handful, and most records repeat the topic of
// the one before, so Add is a string comparison in the common case. The
// zero value is empty and ready.
type Topics struct {
	list []string
	last string
}

// Add notes that the transaction produced to topic.
func (t *Topics) Add(topic string) {
	if topic == t.last {
		return
	}
	t.last = topic
	if !slices.Contains(t.list, topic) {
		t.list = append(t.list, topic)
	}
}

// List returns the topics added, in the order first added.
func (t *Topics) List() []string { return t.list }

// Settled reports whether cl has published the partitions of topic to its
// producer, or its attempt to learn them failed (which fails the topic's
// records, and so the transaction). A topic cl produced to is among its
// producer's topics from the first record on, with no partitions until
// they are published.
func Settled(cl *kgo.Client, topic string) bool {
	leader, _, err := cl.PartitionLeader(topic, 0)
	return leader >= 0 || err != nil
}

// ErrUnsettled is returned by Await when a topic's partitions were not
// settled in time: the transaction must be aborted, not committed.
var ErrUnsettled = errors.New("kafkatxn: the Kafka client had not settled the partitions of a topic the transaction produced to")

// Await waits until settled reports true for every topic in topics (call
// it after Flush, before EndTransaction), polling with a back-off from
// 20 µs to 10 ms. It returns an error wrapping ErrUnsettled after limit,
// or ctx's error when ctx ends first. settled is Settled of the
// transaction's client, or a test's stand-in for it.
func Await(ctx context.Context, topics []string, limit time.Duration, settled func(topic string) bool) error {
	var deadline time.Time
	backoff := 20 * time.Microsecond
	for _, topic := range topics {
		for !settled(topic) {
			if err := ctx.Err(); err != nil {
				return err
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(limit)
			} else if now.After(deadline) {
				return fmt.Errorf("%w within %v: %s", ErrUnsettled, limit, topic)
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 10*time.Millisecond)
		}
	}
	return nil
}
