package kafkaclient

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/module"
)

// A node's rebalance timeout fits three times in its transaction timeout
// whichever of the two is given, so that a transaction waiting for a join
// and sync of the group is never aborted by its coordinator meanwhile; a
// rebalance timeout that does not fit is refused, saying what to set.
func TestClusterTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name            string
		props           []module.KafkaProperty
		rebalance, txn  time.Duration
		refused, reason string
	}{
		{name: "defaults", rebalance: 40 * time.Second / 3, txn: 40 * time.Second},
		{name: "transaction given", props: []module.KafkaProperty{{Key: "transaction.timeout.ms", Value: "10000"}},
			rebalance: 10 * time.Second / 3, txn: 10 * time.Second},
		{name: "short rebalance given", props: []module.KafkaProperty{{Key: "max.poll.interval.ms", Value: "5000"}},
			rebalance: 5 * time.Second, txn: 40 * time.Second},
		{name: "long rebalance given", props: []module.KafkaProperty{{Key: "max.poll.interval.ms", Value: "60000"}},
			rebalance: time.Minute, txn: 3 * time.Minute},
		{name: "both, consistent", props: []module.KafkaProperty{{Key: "max.poll.interval.ms", Value: "20000"}, {Key: "transaction.timeout.ms", Value: "60000"}},
			rebalance: 20 * time.Second, txn: time.Minute},
		{name: "both, inconsistent", props: []module.KafkaProperty{{Key: "max.poll.interval.ms", Value: "60000"}, {Key: "transaction.timeout.ms", Value: "40000"}},
			refused: "max.poll.interval.ms: \"60000\" (the rebalance timeout) is longer than a third of transaction.timeout.ms (40s)", reason: "set it to at most 13333"},
		{name: "transaction too short", props: []module.KafkaProperty{{Key: "transaction.timeout.ms", Value: "200"}},
			refused: "transaction.timeout.ms: \"200\" is too short to hold a rebalance", reason: "want at least 300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ForCluster([]string{"localhost:9092"}, tc.props, nil)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("got %v, want it refused: %s … %s", err, tc.refused, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var opts []kgo.Opt
			opts = append(append(append(opts, c.Opts...), c.GroupOpts...), c.ProducerOpts...)
			cl := client(t, opts, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.TransactionalID("x"))
			if got := cl.OptValue(kgo.RebalanceTimeout); got != tc.rebalance {
				t.Errorf("rebalance timeout %v, want %v", got, tc.rebalance)
			}
			if got := cl.OptValue(kgo.TransactionTimeout); got != tc.txn {
				t.Errorf("transaction timeout %v, want %v", got, tc.txn)
			}
		})
	}
}
