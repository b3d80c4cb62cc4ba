package kafkaegress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/store"
)

// refusal waits until r refuses to deliver because of its marker, and
// returns the refusal.
func refusal(t *testing.T, r *Relay) *MarkerRefusedError {
	t.Helper()
	var refused *MarkerRefusedError
	waitFor(t, "the refusal", func() bool { return errors.As(r.Ready(), &refused) })
	return refused
}

// holdsRefusal checks, for a while (many retries of the relay), that r
// keeps refusing with the same marker, that the outbox still holds n
// records, and that the output topic still holds only had records.
func holdsRefusal(t *testing.T, r *Relay, rt *runtime, brokers []string, n, had int) {
	t.Helper()
	first := refusal(t, r)
	for range 10 { // the relay retries every 5-50 ms
		time.Sleep(30 * time.Millisecond)
		var refused *MarkerRefusedError
		if err := r.Ready(); !errors.As(err, &refused) || refused.Marker != first.Marker {
			t.Fatalf("the refusal did not hold: Ready = %v", err)
		}
	}
	if got := outboxLen(t, rt); got != n {
		t.Fatalf("the outbox holds %d records, want all %d: records were removed without being delivered", got, n)
	}
	if got := len(readTopic(t, brokers, outTopic, true)); got != had {
		t.Fatalf("the output topic holds %d records, want the %d delivered before", got, had)
	}
}

// waitWritten waits until the functions wrote egress positions up to n
// (ingest returns before they run), which must pass the marker's.
func waitWritten(t *testing.T, rt *runtime, n, marker uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("egress positions up to %d", n), func() bool {
		seq, err := rt.db.MaxEgressSeq()
		return err == nil && seq >= n
	})
	if n <= marker {
		t.Fatalf("positions up to %d do not pass the marker's %d: the test proves nothing", n, marker)
	}
}

func outboxLen(t *testing.T, rt *runtime) int {
	t.Helper()
	items, err := rt.eng.ReadEgressBatch(context.Background(), egressID, egressID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return len(items)
}

// values of m<from>..m<from+n-1> for each range, sorted.
func wantRanges(ranges ...[2]int) []string {
	var vs []string
	for _, r := range ranges {
		vs = append(vs, want(r[0], r[1])...)
	}
	sort.Strings(vs)
	return vs
}

// waitOutput waits until the outbox is empty and the output topic holds
// exactly the values w, each once.
func waitOutput(t *testing.T, rt *runtime, brokers []string, w []string) {
	t.Helper()
	var got []string
	waitFor(t, fmt.Sprintf("%d records on the output topic", len(w)), func() bool {
		if !rt.outboxEmpty(t) {
			return false
		}
		got = values(readTopic(t, brokers, outTopic, true))
		return len(got) >= len(w)
	})
	if !slices.Equal(got, w) {
		t.Fatalf("a read_committed consumer sees %d records, want each of %d exactly once: %v", len(got), len(w), dups(got))
	}
}

// A new data directory meets the marker of the old one (same transactional
// id). The relay refuses to deliver — also once the new store's positions
// pass the old marker's, which used to make it remove every record up to
// that position unsent — until the operator names the marker to reset;
// then everything of both stores is on the topic exactly once.
func TestMarkerOfAnotherStoreRefusedUntilReset(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	cfg := testConfig(c, ExactlyOnce)
	r1 := newRelay(t, cfg)
	rtA := openRuntime(t, vfs.NewMem(), r1.Route, nil)
	rtA.start(r1)
	rtA.ingest(t, 0, 20, 3)
	waitDelivered(t, rtA, brokers, 20)
	r1.Close()
	idA := rtA.db.ID()
	rtA.close()

	// A fresh store, same transactional id: a few records, then more
	// than the old marker's position.
	r2 := newRelay(t, cfg)
	rtB := openRuntime(t, vfs.NewMem(), r2.Route, nil)
	rtB.ingest(t, 100, 3, 3)
	rtB.start(r2)
	refused := refusal(t, r2)
	if refused.Marker.Store != idA || refused.Marker.Position < 20 {
		t.Fatalf("the refusal names marker %v, want store %s at 20 or more", refused.Marker, idA)
	}
	for _, w := range []string{"is not this store's", "store " + idA + " wrote it", "--kafka-egress-reset-marker=test/kafka=" + idA + "@"} {
		if !strings.Contains(refused.Error(), w) {
			t.Errorf("the refusal does not say %q: %v", w, refused)
		}
	}
	rtB.ingest(t, 103, 40, 3)
	waitWritten(t, rtB, 43, refused.Marker.Position)
	holdsRefusal(t, r2, rtB, brokers, 43, 20)

	// A reset naming another marker changes nothing.
	r2.Close()
	other := MarkerRef{Store: idA, Position: refused.Marker.Position + 1}
	cfg3 := cfg
	cfg3.ResetMarker = &other
	r3 := newRelay(t, cfg3)
	rtB.start(r3)
	holdsRefusal(t, r3, rtB, brokers, 43, 20)
	r3.Close()

	// The operator's reset: this store's outbox is delivered whole, once.
	ref := refused.Marker
	cfg4 := cfg
	cfg4.ResetMarker, cfg4.Operator = &ref, "alice@host"
	r4 := newRelay(t, cfg4)
	rtB.start(r4)
	waitOutput(t, rtB, brokers, wantRanges([2]int{0, 20}, [2]int{100, 43}))
	if err := r4.Ready(); err != nil {
		t.Fatalf("ready after the reset: %v", err)
	}
	// The marker is this store's now: a restart without the reset
	// delivers what comes next, once.
	r4.Close()
	r5 := newRelay(t, cfg)
	rtB.start(r5)
	rtB.ingest(t, 143, 5, 3)
	waitOutput(t, rtB, brokers, wantRanges([2]int{0, 20}, [2]int{100, 48}))
}

// A restored backup of the store (same identity) meets the marker the
// store wrote after the backup: refused while it has not written that far,
// and still refused once it has, with other records at those positions.
func TestMarkerOfTheSameStoreAfterARestoreRefused(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	cfg := testConfig(c, ExactlyOnce)
	fs := vfs.NewCrashableMem()
	r1 := newRelay(t, cfg)
	rt := openRuntime(t, fs, r1.Route, nil)
	rt.start(r1)
	rt.ingest(t, 0, 20, 3)
	waitDelivered(t, rt, brokers, 20)
	backup := fs.CrashClone(vfs.CrashCloneCfg{})
	rt.ingest(t, 20, 20, 3)
	waitDelivered(t, rt, brokers, 40)
	r1.Close()
	id := rt.db.ID()
	rt.close()

	r2 := newRelay(t, cfg)
	rtB := openRuntime(t, backup, r2.Route, nil)
	if rtB.db.ID() != id {
		t.Fatalf("the restored store has identity %s, want %s", rtB.db.ID(), id)
	}
	rtB.start(r2)
	refused := refusal(t, r2)
	if !strings.Contains(refused.Why, "older copy") {
		t.Errorf("refusal: %v", refused)
	}
	holdsRefusal(t, r2, rtB, brokers, 0, 40)
	rtB.ingest(t, 200, 30, 3)
	waitWritten(t, rtB, 20+30, refused.Marker.Position)
	refused = refusal(t, r2)
	holdsRefusal(t, r2, rtB, brokers, 30, 40)
	r2.Close()

	cfg3 := cfg
	cfg3.ResetMarker = &refused.Marker
	r3 := newRelay(t, cfg3)
	rtB.start(r3)
	waitOutput(t, rtB, brokers, wantRanges([2]int{0, 40}, [2]int{200, 30}))
}

// produceMarker writes a marker record as an older build (or an operator)
// would, outside any transaction; a nil value is a tombstone.
func produceMarker(t *testing.T, c *kfake.Cluster, txnID string, value []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: DefaultMarkerTopic, Key: []byte(txnID), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// preID is the runtime's store with a chosen PreIDEgressSeq: a store of an
// older build that got its identity after writing that many positions.
type preID struct {
	*store.DB
	pre uint64
}

func (p preID) PreIDEgressSeq() uint64 { return p.pre }

// A marker without a store identity (an older build wrote it) is taken as
// the store's only up to the positions it wrote before it had an identity;
// above, it is refused. A deleted marker (tombstone) is no marker.
func TestMarkerWithoutIdentity(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, DefaultMarkerTopic))
	brokers := c.ListenAddrs()
	cfg := testConfig(c, ExactlyOnce)
	cfg.TransactionalID = "legacy"
	produceMarker(t, c, "legacy", []byte(`{"egress":"test/kafka","position":5}`))

	// A new store: refused, although its positions pass 5.
	r1 := newRelay(t, cfg)
	rt := openRuntime(t, vfs.NewMem(), r1.Route, nil)
	rt.ingest(t, 0, 10, 1)
	rt.start(r1)
	refused := refusal(t, r1)
	if refused.Marker != (MarkerRef{Position: 5}) || !strings.Contains(refused.Error(), "=test/kafka=none@5") {
		t.Fatalf("refusal: %v", refused)
	}
	holdsRefusal(t, r1, rt, brokers, 10, 0)
	r1.Close()

	// The same store as one that wrote positions up to 5 before it had an
	// identity: the marker is taken, records up to 5 count as delivered.
	r2 := newRelay(t, cfg)
	r2.cfg.Store = preID{rt.db, 5}
	r2.Start(rt.eng)
	waitOutput(t, rt, brokers, want(5, 5))
	r2.Close()

	// Deleted: no marker, nothing to refuse.
	cfg.TransactionalID = "deleted"
	produceMarker(t, c, "deleted", []byte(`{"egress":"test/kafka","position":500}`))
	produceMarker(t, c, "deleted", nil)
	r3 := newRelay(t, cfg)
	rt.start(r3)
	rt.ingest(t, 10, 3, 1)
	waitOutput(t, rt, brokers, wantRanges([2]int{5, 5}, [2]int{10, 3}))
}

func TestParseMarkerRef(t *testing.T) {
	for in, w := range map[string]MarkerRef{"abc@12": {"abc", 12}, "none@0": {"", 0}} {
		got, err := ParseMarkerRef(in)
		if err != nil || got != w || got.String() != in {
			t.Errorf("ParseMarkerRef(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "abc", "@1", "abc@", "abc@-1", "abc@x"} {
		if _, err := ParseMarkerRef(in); err == nil {
			t.Errorf("ParseMarkerRef(%q) succeeded", in)
		}
	}
}

// A store restored from a backup (store.DB.Backup, then a start on a copy)
// has an identity of its own and its original as ancestor. The original's
// last marker proves delivery of the records the two share — up to the
// backup's egress position — and no further: whether the original
// delivered beyond the backup's position (its marker is above it) or not
// (the backup holds records the original never delivered), every record
// reaches the topic exactly once, and the restored store's own records,
// at positions the original had used for others, are never skipped.
func TestRestoredBackupTakesItsOriginsMarker(t *testing.T) {
	for _, tc := range []struct {
		name             string
		originDelivers   bool // the original delivers what the backup holds undelivered, and more
		wantFromOriginal [2]int
	}{
		{"the original delivered past the backup", true, [2]int{0, 50}},
		{"the original delivered less than the backup holds", false, [2]int{0, 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			brokers := c.ListenAddrs()
			cfg := testConfig(c, ExactlyOnce)
			fs := vfs.NewMem()
			r1 := newRelay(t, cfg)
			rt := openRuntime(t, fs, r1.Route, nil)
			rt.start(r1)
			rt.ingest(t, 0, 20, 3)
			waitDelivered(t, rt, brokers, 20)
			r1.Close()
			// Ten records wait in the outbox when the backup is taken.
			rt.ingest(t, 20, 10, 3)
			waitFor(t, "positions up to 30", func() bool {
				seq, err := rt.db.MaxEgressSeq()
				return err == nil && seq >= 30
			})
			m, err := rt.db.Backup("/backup", store.BackupOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.EgressPosition != 30 {
				t.Fatalf("the backup's egress position is %d, want 30", m.EgressPosition)
			}
			orig := rt.db.ID()
			if tc.originDelivers {
				r2 := newRelay(t, cfg)
				rt.start(r2)
				rt.ingest(t, 30, 20, 3)
				waitDelivered(t, rt, brokers, 50)
				r2.Close()
			}
			rt.close()

			restored := vfs.NewMem()
			if _, err := vfs.Clone(fs, restored, "/backup", "data"); err != nil {
				t.Fatal(err)
			}
			r3 := newRelay(t, cfg)
			rtB := openRuntime(t, restored, r3.Route, nil)
			if rtB.db.ID() == orig {
				t.Fatal("the restored store kept its original's identity")
			}
			if pos, ok := rtB.db.SharedWith(orig); !ok || pos != 30 {
				t.Fatalf("the restored store shares positions up to %d (%v) with its original, want 30", pos, ok)
			}
			// Its own records take positions from 31 on: under the
			// original's marker when it delivered up to 50.
			rtB.ingest(t, 200, 30, 3)
			waitFor(t, "positions up to 60", func() bool {
				seq, err := rtB.db.MaxEgressSeq()
				return err == nil && seq >= 60
			})
			rtB.start(r3)
			waitOutput(t, rtB, brokers, wantRanges(tc.wantFromOriginal, [2]int{200, 30}))
			if err := r3.Ready(); err != nil {
				t.Fatalf("not ready: %v", err)
			}
			// The marker is the restored store's own now: a restart
			// delivers what comes next, once.
			r3.Close()
			r4 := newRelay(t, cfg)
			rtB.start(r4)
			rtB.ingest(t, 230, 5, 3)
			waitOutput(t, rtB, brokers, wantRanges(tc.wantFromOriginal, [2]int{200, 35}))
		})
	}
}
