package failover

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/topics"
)

// member joins the application's group as node id as a node's session
// does: a group transact session with the node id as instance id and
// <app>-<node id> as transactional id, cooperative-sticky.
func member(t *testing.T, cfg *clusterconfig.Config, id string) *kgo.GroupTransactSession {
	t.Helper()
	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumerGroup(cfg.Group()), kgo.ConsumeTopics(cfg.MessagesTopic()),
		kgo.InstanceID(id), kgo.TransactionalID(cfg.TransactionalIDOf(id)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(time.Minute), kgo.HeartbeatInterval(time.Second), kgo.TransactionTimeout(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// Joining happens on the first poll.
	go func() {
		for {
			fs := s.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
		}
	}()
	return s
}

// On kfake, with two nodes in the group and one of them (b) holding an
// open transaction on the changelog: the owners are read with their
// member ids; b's transaction reads as open; the fence aborts it (the
// changelog's last stable offset reaches its end, and b's late commit is
// refused); the leave removes b, and the survivor owns every partition
// once it rejoins. Each step done again, as another survivor would, is
// harmless.
func TestKafkaOpsRemoveADeadNode(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := &clusterconfig.Config{Brokers: kc.ListenAddrs(), AppID: "app", NodeID: "a", Advertise: "http://a", Partitions: 4}
	if _, err := topics.Ensure(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	k := &kafkaOps{cfg: cfg, cl: cl, adm: adm, txnTimeout: time.Minute}

	a := member(t, cfg, "a")
	b := member(t, cfg, "b")
	var owners map[string]string
	eventually(t, "a and b to own partitions", func() bool {
		owners, err = k.owners(ctx)
		return err == nil && owners["a"] != "" && owners["b"] != ""
	})

	// b writes into the changelog in a transaction it never ends.
	if err := b.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client().ProduceSync(ctx, &kgo.Record{Topic: cfg.ChangelogTopic(), Partition: 1, Value: []byte("late")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st, err := k.txn(ctx, "b")
	if err != nil || !st.open() {
		t.Fatalf("b's transaction: %+v, %v; want it open", st, err)
	}
	if stable(t, adm, cfg.ChangelogTopic(), 1) {
		t.Fatal("the changelog is stable with b's transaction open")
	}

	if err := k.fence(ctx, "b", st); err != nil {
		t.Fatal(err)
	}
	if after, err := k.txn(ctx, "b"); err != nil || after.open() || after.epoch <= st.epoch {
		t.Errorf("b's transaction after the fence: %+v, %v; want none open and a newer epoch than %d", after, err, st.epoch)
	}
	if !stable(t, adm, cfg.ChangelogTopic(), 1) {
		t.Error("the changelog is not stable after the fence: a restore would wait")
	}
	if err := k.fence(ctx, "b", st); err != nil {
		t.Errorf("a second fence with the same state: %v; want it harmless", err)
	}
	if committed, err := b.End(ctx, kgo.TryCommit); committed || err == nil {
		t.Errorf("b's late commit: committed %v, %v; want it refused", committed, err)
	}

	// (kfake resolves a static member by its instance id alone, so the
	// member id named, which a broker compares, is not tested here.)
	if removed, gone, err := k.leave(ctx, "b", owners["b"]); !removed || !gone || err != nil {
		t.Fatalf("leave: removed %v, gone %v, %v", removed, gone, err)
	}
	if removed, gone, err := k.leave(ctx, "b", owners["b"]); removed || !gone || err != nil {
		t.Errorf("a second leave: removed %v, gone %v, %v; want it gone already, harmlessly", removed, gone, err)
	}
	a.Client().ForceRebalance()
	eventually(t, "a to own every partition", func() bool {
		o, err := k.owners(ctx)
		_, bIn := o["b"]
		if err != nil || bIn {
			return false
		}
		g, err := adm.DescribeGroups(ctx, cfg.Group())
		if err != nil {
			return false
		}
		n := 0
		for _, m := range g[cfg.Group()].Members {
			if as, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range as.Topics {
					n += len(tp.Partitions)
				}
			}
		}
		return n == 4
	})
}

// stable reports whether partition p of topic has no open transaction.
func stable(t *testing.T, adm *kadm.Client, topic string, p int32) bool {
	t.Helper()
	ctx := context.Background()
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := end.Lookup(topic, p)
	s, _ := lso.Lookup(topic, p)
	return s.Offset >= e.Offset
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
