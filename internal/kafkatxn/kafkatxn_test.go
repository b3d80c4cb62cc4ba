package kafkatxn

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTopicsListsEachOnceInOrder(t *testing.T) {
	var ts Topics
	for _, topic := range []string{"changelog", "changelog", "messages", "changelog", "out", "messages", "out"} {
		ts.Add(topic)
	}
	if got, want := ts.List(), []string{"changelog", "messages", "out"}; !slices.Equal(got, want) {
		t.Fatalf("List() = %v, want %v", got, want)
	}
}

// Settled is false for a topic the client has not produced to and true
// once a record of it was produced, in a transaction on a real Kafka
// protocol cluster.
func TestSettledOnceTheClientProducedToTheTopic(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.TransactionalID("kafkatxn-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if Settled(cl, "out") {
		t.Fatal("Settled before the client produced to the topic")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := Await(ctx, []string{"out"}, 10*time.Second, func(topic string) bool { return Settled(cl, topic) }); err != nil {
		t.Fatalf("Await after the produce: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	fs := rd.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	if n := fs.NumRecords(); n != 1 {
		t.Fatalf("read_committed sees %d records, want the one committed", n)
	}
}

func TestAwaitWaitsUntilEveryTopicIsSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lag := map[string]int{"a": 3, "b": 5}
		var asked []string
		settled := func(topic string) bool {
			asked = append(asked, topic)
			if lag[topic] > 0 {
				lag[topic]--
				return false
			}
			return true
		}
		if err := Await(t.Context(), []string{"a", "b"}, time.Second, settled); err != nil {
			t.Fatal(err)
		}
		if lag["a"] != 0 || lag["b"] != 0 {
			t.Fatalf("Await returned with topics unsettled: %v", lag)
		}
		if len(asked) != 4+6 {
			t.Fatalf("asked %d times, want 10 (each topic until settled): %v", len(asked), asked)
		}
	})
}

func TestAwaitGivesUpAfterItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := Await(t.Context(), []string{"a"}, 2*time.Second, func(string) bool { return false })
		if !errors.Is(err, ErrUnsettled) {
			t.Fatalf("Await = %v, want ErrUnsettled", err)
		}
		if waited := time.Since(start); waited < 2*time.Second || waited > 2*time.Second+20*time.Millisecond {
			t.Fatalf("gave up after %v, want 2 s", waited)
		}
	})
}

func TestAwaitEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		err := Await(ctx, []string{"a"}, time.Minute, func(string) bool { return false })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Await = %v, want the context's error", err)
		}
	})
}
