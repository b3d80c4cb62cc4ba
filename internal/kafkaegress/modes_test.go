package kafkaegress

import (
	"context"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// At-least-once: a relay killed after Kafka acknowledged a batch and before
// the outbox removal sends that batch again after the restart; nothing is
// lost.
func TestAtLeastOnceNeverLoses(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c, AtLeastOnce)
	r1 := newRelay(t, cfg)
	hook, fired := crashAt(crashBeforeAck, 2)
	r1.crash = hook
	rt := openRuntime(t, vfs.NewMem(), r1.Route, nil)
	rt.ingest(t, 0, 40, 6)
	r1.Start(rt.eng)
	await(t, "the crash", fired)
	await(t, "the crashed relay to stop", r1.done)

	r2 := newRelay(t, cfg)
	r2.Start(rt.eng)
	waitFor(t, "every record delivered", func() bool { return rt.outboxEmpty(t) })
	recs := readTopic(t, c.ListenAddrs(), outTopic, true)
	assertAtLeastOnce(t, recs, 40)
	if len(recs) != 40+cfg.BatchRecords {
		t.Fatalf("%d records; want the 40 and the %d of the batch the crash left in the outbox again", len(recs), cfg.BatchRecords)
	}
}

// None: records are delivered while Kafka works.
func TestNoneDelivers(t *testing.T) {
	c := newCluster(t)
	r := newRelay(t, testConfig(c, None))
	rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
	r.Start(rt.eng)
	rt.ingest(t, 0, 30, 4)
	waitFor(t, "30 records", func() bool {
		return rt.outboxEmpty(t) && len(readTopic(t, c.ListenAddrs(), outTopic, true)) == 30
	})
	if got := values(readTopic(t, c.ListenAddrs(), outTopic, true)); !slices.Equal(got, want(0, 30)) {
		t.Fatalf("got %v", got)
	}
}

// A marker for a position this store never wrote (a new data directory with
// the same transactional id) stops the egress with a reason, instead of
// silently skipping the new store's records as delivered.
func TestMarkerFromAnotherStoreRefused(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c, ExactlyOnce)
	r1 := newRelay(t, cfg)
	rt1 := openRuntime(t, vfs.NewMem(), r1.Route, nil)
	r1.Start(rt1.eng)
	rt1.ingest(t, 0, 20, 3)
	waitDelivered(t, rt1, c.ListenAddrs(), 20)
	r1.Close()

	// A fresh store, same transactional id.
	r2 := newRelay(t, cfg)
	rt2 := openRuntime(t, vfs.NewMem(), r2.Route, nil)
	r2.cfg.Store = rt2.db // *store.DB, as the runtime passes it
	rt2.ingest(t, 100, 3, 3)
	r2.Start(rt2.eng)
	var why error
	waitFor(t, "the refusal", func() bool {
		why = r2.Ready()
		return why != nil && strings.Contains(why.Error(), "never wrote a position above")
	})
	t.Log(why)
	if rt2.outboxEmpty(t) {
		t.Fatal("the new store's records were dropped as if delivered")
	}
}

// A real non-Go client, kcat (librdkafka), reading the output topic
// read_committed sees each record once.
func TestKcatReadsCommitted(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install kcat); this test reads the output with a non-Go client")
	}
	c := newCluster(t)
	r := newRelay(t, testConfig(c, ExactlyOnce))
	rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
	r.Start(rt.eng)
	rt.ingest(t, 0, 50, 7)
	waitDelivered(t, rt, c.ListenAddrs(), 50)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(c.ListenAddrs(), ","), "-t", outTopic,
		"-X", "isolation.level=read_committed", "-o", "beginning", "-e", "-q", "-f", "%k %s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var vals []string
	for _, l := range lines {
		k, v, _ := strings.Cut(l, " ")
		if !strings.HasPrefix(k, "id") {
			t.Fatalf("kcat line %q: the key is not the sender's id", l)
		}
		vals = append(vals, v)
	}
	sort.Strings(vals)
	if !slices.Equal(vals, want(0, 50)) {
		t.Fatalf("kcat read_committed sees %d records: %v", len(vals), dups(vals))
	}
}
