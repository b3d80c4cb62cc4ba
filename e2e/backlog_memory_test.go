package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

var (
	flagBacklogMessages = flag.Int("backlog.messages", 8_000, "messages TestBacklogIsPagedThroughTheStore fans out to its slow function")
	flagBacklogBound    = flag.Int("backlog.bound", 200, "--max-backlog TestBacklogIsPagedThroughTheStore runs with (0: the default)")
	flagBacklogParts    = flag.Int("backlog.partitions", 4, "--partitions TestBacklogIsPagedThroughTheStore runs with (0: the default)")
)

// TestBacklogIsPagedThroughTheStore: messages a partition cannot refuse —
// those functions send it — past its bound wait in its inbox in the store,
// not in memory, while the function they are for is slow; a restart finds
// them there and holds no more; and once the function answers every one
// runs exactly once.
//
// One ingress message makes a sender fan out to other senders, which send
// every message to 20 slow sinks (their requests wait until the test
// opens the gate). The partitions' queues stay at their bound, the rest
// waits in the store (statefun_inbox_paged_messages), the RSS stays flat;
// after a SIGKILL the restart holds no more; once the sinks answer, their
// counters add up to exactly the messages sent.
//
// At full scale (a benchmark, not make test):
//
//	go test ./e2e -run TestBacklogIsPagedThroughTheStore -backlog.messages=100000 -backlog.bound=0 -v
func TestBacklogIsPagedThroughTheStore(t *testing.T) {
	const (
		sinks   = 20
		senders = 10
	)
	total, bound, parts := *flagBacklogMessages, *flagBacklogBound, *flagBacklogParts
	perSender := total / senders
	total = perSender * senders

	fs := sdktest.StartFeatureServer(t)
	open := fs.Gate(sdktest.FeaturesFn, "sink-")
	defer open()
	rt := newRuntimeWith(t, playgroundModule(fs.URL, []string{"sdktest"}, featureTopics))
	rt.routeEgress(fs)
	var args []string
	if parts > 0 {
		args = append(args, "--partitions", strconv.Itoa(parts))
	} else {
		parts = defaultPartitions
	}
	if bound > 0 {
		args = append(args, "--max-backlog", strconv.Itoa(bound))
	}
	saStart(rt, "http", http.DefaultClient, args...)

	// One ingress message; the fan-out is functions messaging each other,
	// which no partition refuses.
	var fan []sdktest.Command
	for s := range senders {
		var sends []sdktest.Command
		for i := range perSender {
			sends = append(sends, sdktest.Command{Op: sdktest.OpSend, To: &sdktest.Target{ID: fmt.Sprint("sink-", (s*perSender+i)%sinks)},
				Command: &sdktest.Command{Op: sdktest.OpIncr}})
		}
		fan = append(fan, sdktest.Command{Op: sdktest.OpSend, To: &sdktest.Target{ID: fmt.Sprint("sender-", s)}, Command: ptr(seq(sends...))})
	}
	command(t, rt, sdktest.FeaturesFn, "fan", seq(fan...))

	paged := func() float64 {
		n := 0.0
		for p := range parts {
			n += metric(t, rt, fmt.Sprintf(`statefun_inbox_paged_messages{partition="%d"}`, p))
		}
		return n
	}
	// in says how many of the sinks' messages the runtime holds: in
	// memory (queued for their addresses or in calls) and in the store.
	in := func() (mem, stored float64) {
		for p := range parts {
			mem += metric(t, rt, fmt.Sprintf(`statefun_queue_depth{partition="%d"}`, p))
		}
		return mem, paged()
	}
	held := func(when string) {
		t.Helper()
		// The fan-out has been sent when every message is in.
		deadline := time.Now().Add(3 * time.Minute)
		mem, stored := in()
		for mem+stored < float64(total) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			mem, stored = in()
		}
		for p := range parts {
			if q := metric(t, rt, fmt.Sprintf(`statefun_queue_depth{partition="%d"}`, p)); bound > 0 && q > float64(bound) {
				t.Errorf("%s: partition %d holds %v messages, over its bound of %d", when, p, q, bound)
			}
		}
		if mem+stored < float64(total) {
			t.Fatalf("%s: %v messages in memory and %v in the store, want %d", when, mem, stored, total)
		}
		if bound > 0 && mem > float64(parts*bound) {
			t.Errorf("%s: %v messages in memory, over %d partitions' bound of %d", when, mem, parts, bound)
		}
		rss := processRSS(t, rt.cmd.Process.Pid)
		t.Logf("%s: %v messages in memory, %v in the store, of %d sent; RSS %d MiB, heap in use %.0f MiB, %v goroutines",
			when, mem, stored, total, rss>>20, metric(t, rt, "go_memstats_heap_inuse_bytes")/(1<<20), metric(t, rt, "go_goroutines"))
	}
	held("sent")
	if bound > 0 {
		// What an operator sees of an address: the messages its partition
		// holds, and how many more wait in the store.
		most := 0
		for i := range sinks {
			resp, err := http.Get("http://" + rt.admin + "/inbox/sdktest/features/sink-" + strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			var in struct {
				Queued struct {
					PagedInPartition int `json:"pagedInPartition"`
				} `json:"queued"`
			}
			err = json.NewDecoder(resp.Body).Decode(&in)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, in.Queued.PagedInPartition)
		}
		if most == 0 {
			t.Errorf("GET /inbox of every sink says nothing waits in the store")
		}
	}

	rt.kill()
	saStart(rt, "http", http.DefaultClient, args...)
	held("restarted")

	// The sinks answer: every message runs, once.
	open()
	counts := map[string]int{}
	for i := range total {
		counts[fmt.Sprint("sink-", i%sinks)]++
	}
	rt.waitStates(sdktest.FeaturesFn, sdktest.StateInt64, counts, 5*time.Minute)
	if n := paged(); n != 0 {
		t.Errorf("%v messages still wait in the store after every one ran", n)
	}
}

// defaultPartitions is the partitions of a new store without --partitions.
const defaultPartitions = 16

func ptr[T any](v T) *T { return &v }
