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
	rt.start(r1)
	await(t, "the crash", fired)
	await(t, "the crashed relay to stop", r1.done)

	r2 := newRelay(t, cfg)
	rt.start(r2)
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
	rt.start(r)
	rt.ingest(t, 0, 30, 4)
	waitFor(t, "30 records", func() bool {
		return rt.outboxEmpty(t) && len(readTopic(t, c.ListenAddrs(), outTopic, true)) == 30
	})
	if got := values(readTopic(t, c.ListenAddrs(), outTopic, true)); !slices.Equal(got, want(0, 30)) {
		t.Fatalf("got %v", got)
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
	rt.start(r)
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
