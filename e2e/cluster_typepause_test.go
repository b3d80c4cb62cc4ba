package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// arrivals is what an official-SDK kc/counter saw: the texts of the
// messages each id was invoked with, in order.
type arrivals struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (a *arrivals) of(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen[id])
}

// orderedCounterFn serves kc/counter with the official Go SDK: it counts
// its messages in "count" and records each message's text, so a test sees
// every invocation, how often and in which order.
func orderedCounterFn(t *testing.T) (string, *arrivals) {
	log := &arrivals{seen: map[string][]string{}}
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("kc/counter"),
		States:       []statefun.ValueSpec{kafkaCount},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int64
			ctx.Storage().Get(kafkaCount, &n)
			ctx.Storage().Set(kafkaCount, n+1)
			log.mu.Lock()
			log.seen[ctx.Self().Id] = append(log.seen[ctx.Self().Id], string(msg.RawValue()))
			log.mu.Unlock()
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL, log
}

// typePause sends POST /pause/kc/counter (or /resume/...) to node n; while
// it answers 503 (partitions moving), it sends it again with its mutation
// id, as an operator would, with the CLI (`statefun state pause|resume
// --mutation-id`, whose error on a 503 must say so), until it answers
// otherwise or timeout passes. It returns the last answer and how many
// 503s came before it.
func typePause(t *testing.T, n *clusterNode, action, reason string, timeout time.Duration) (stateReply, int) {
	t.Helper()
	r := n.api(t, http.MethodPost, "/"+action+"/kc/counter", `{"reason":"`+reason+`"}`, "Content-Type", "application/json")
	if r.status != http.StatusServiceUnavailable || timeout == 0 {
		return r, 0
	}
	var pr struct {
		Mutation string `json:"mutation"`
		Missing  []int  `json:"missingPartitions"`
	}
	json.Unmarshal(r.body, &pr)
	if pr.Mutation == "" || len(pr.Missing) == 0 || r.header.Get("Location") != "/mutations/"+pr.Mutation || r.header.Get("Retry-After") == "" {
		t.Fatalf("%s of kc/counter on %s: 503 without its mutation, the missing partitions, Location and Retry-After: %v %s", action, n.id, r.header, r.body)
	}
	retries := 1
	deadline := time.Now().Add(timeout)
	for {
		t.Logf("%s of kc/counter on %s: 503, partitions %v missing; sending it again as %s", action, n.id, pr.Missing, pr.Mutation)
		time.Sleep(time.Second)
		cmd := exec.Command(binary, "state", action, "-o", "json", "--reason", reason, "--mutation-id", pr.Mutation, "kc/counter")
		cmd.Env = append(os.Environ(), "STATEFUN_SERVER=http://"+n.admin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil {
			return stateReply{status: http.StatusOK, body: out}, retries
		}
		if !strings.Contains(stderr.String(), "503") || time.Now().After(deadline) {
			return stateReply{status: -1, body: stderr.Bytes()}, retries
		}
		if hint := "--mutation-id " + pr.Mutation; !strings.Contains(stderr.String(), hint) {
			t.Fatalf("statefun state %s answered 503 without saying how to complete it (%q): %s", action, hint, stderr.String())
		}
		retries++
	}
}

// committedReceipt reads the receipt of a pause or resume answer.
func committedReceipt(t *testing.T, what string, r stateReply) receipt {
	t.Helper()
	var rc receipt
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rc) != nil || rc.Status != "committed" || rc.Mutation == "" {
		t.Fatalf("%s: %d %s; want 200 with a committed receipt", what, r.status, r.body)
	}
	return rc
}

// sendAll sends text to every id, through the nodes in turn.
func sendAll(t *testing.T, nodes []*clusterNode, ids []string, text string) {
	t.Helper()
	for i, id := range ids {
		n := nodes[i%len(nodes)]
		if status, err := n.send("/kc/counter/"+id, "kc/text", text); err != nil || status != http.StatusOK {
			t.Fatalf("message %q to %s through %s: %d %v", text, id, n.id, status, err)
		}
	}
}

// waitHeld waits until every node shows each id's inbox held by the
// type's pause mut with queued messages (read through any node: the
// owner answers).
func waitHeld(t *testing.T, nodes []*clusterNode, ids []string, mut string, queued int) {
	t.Helper()
	for _, n := range nodes {
		for _, id := range ids {
			var in struct {
				TypePaused *struct {
					Mutation string `json:"mutation"`
				} `json:"typePaused"`
				Inflight *json.RawMessage `json:"inflight"`
				Queued   struct {
					Count int `json:"count"`
				} `json:"queued"`
			}
			var last stateReply
			waitFor(t, 60*time.Second, fmt.Sprintf("%s's inbox, read from %s, holding %d messages behind %s", id, n.id, queued, mut), func() bool {
				last = n.api(t, http.MethodGet, "/inbox/kc/counter/"+id, "")
				in.TypePaused, in.Inflight = nil, nil
				return last.status == 200 && json.Unmarshal(last.body, &in) == nil && in.TypePaused != nil &&
					in.TypePaused.Mutation == mut && in.Queued.Count == queued && in.Inflight == nil
			})
		}
	}
}

// auditCount is the number of audit records of mutation mid, gathered
// through node n.
func auditCount(t *testing.T, n *clusterNode, mid string) int {
	t.Helper()
	return len(auditOf(t, n, mid))
}

// TestClusterPauseTypeEveryNode pauses a function type through one node of
// three: no address of it, on any partition, is invoked while it holds
// (every node shows the messages queued behind it); a resume through
// another node releases every message exactly once, in arrival order. The
// pause and the resume have one receipt and one audit record each, and
// the pause sent again with its mutation id answers that receipt without
// pausing anything again.
func TestClusterPauseTypeEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "counts:3")
	fn, log := orderedCounterFn(t)
	nodes := newClusterNodes(t, dk, "typepause", fn, "node-a", "node-b", "node-c")
	launchAll(t, nodes...)
	ids := idPerPartition("tp")
	sendAll(t, nodes, ids, "0")
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	waitCounts(t, nodes, want, 60*time.Second)

	r, _ := typePause(t, nodes[0], "pause", "deploy", 0)
	pause := committedReceipt(t, "pause of kc/counter through node-a", r)
	for _, text := range []string{"1", "2", "3"} {
		sendAll(t, nodes, ids, text)
	}
	waitHeld(t, nodes, ids, pause.Mutation, 3)
	for _, id := range ids {
		if v, ok := count(t, nodes, id); !ok || v != 1 {
			t.Errorf("%s while its type is paused = %d (%v); want 1", id, v, ok)
		}
		if got := log.of(id); !slices.Equal(got, []string{"0"}) {
			t.Errorf("%s invoked with %v while its type is paused; want only the message before the pause", id, got)
		}
	}
	for _, n := range nodes {
		r := n.api(t, http.MethodGet, "/pauses?type=kc/counter", "")
		var out struct {
			Pauses []struct {
				ID       *string `json:"id"`
				Mutation string  `json:"mutation"`
			} `json:"pauses"`
		}
		json.Unmarshal(r.body, &out)
		if r.status != 200 || len(out.Pauses) != 1 || out.Pauses[0].ID != nil || out.Pauses[0].Mutation != pause.Mutation {
			t.Errorf("GET /pauses on %s: %d %s; want the type's pause, once", n.id, r.status, r.body)
		}
		if rc, status := storedReceipt(t, n, pause.Mutation); status != 200 || rc.Status != "committed" {
			t.Errorf("the pause's receipt read through %s: %d %+v", n.id, status, rc)
		}
	}
	if got := auditCount(t, nodes[2], pause.Mutation); got != 1 {
		t.Errorf("the pause has %d audit records; want 1", got)
	}

	r, _ = typePause(t, nodes[1], "resume", "deployed", 0)
	resume := committedReceipt(t, "resume of kc/counter through node-b", r)
	for _, id := range ids {
		want[id] = 4
	}
	waitCounts(t, nodes, want, 60*time.Second)
	for _, id := range ids {
		if got := log.of(id); !slices.Equal(got, []string{"0", "1", "2", "3"}) {
			t.Errorf("%s was invoked with %v; want 0 1 2 3, each once", id, got)
		}
	}
	if got := auditCount(t, nodes[0], resume.Mutation); got != 1 {
		t.Errorf("the resume has %d audit records; want 1", got)
	}

	// The pause sent again with its id (a client that lost the answer),
	// with the CLI's --mutation-id: its receipt, nothing paused again, no
	// second audit record.
	cmd := exec.Command(binary, "state", "pause", "-o", "json", "--mutation-id", pause.Mutation, "kc/counter")
	cmd.Env = append(os.Environ(), "STATEFUN_SERVER=http://"+nodes[2].admin)
	out, err := cmd.Output()
	var again receipt
	if err != nil || json.Unmarshal(out, &again) != nil {
		t.Fatalf("statefun state pause --mutation-id %s: %v\n%s", pause.Mutation, err, out)
	}
	if again.Mutation != pause.Mutation || *again.Checkpoint != *pause.Checkpoint {
		t.Errorf("the pause sent again: %+v; want its receipt %+v", again, pause)
	}
	if got := auditCount(t, nodes[1], pause.Mutation); got != 1 {
		t.Errorf("after the repeat the pause has %d audit records; want 1", got)
	}
	sendAll(t, nodes, ids, "4")
	for _, id := range ids {
		want[id] = 5
	}
	waitCounts(t, nodes, want, 60*time.Second)
}

// A killed node's last invocations may run again on the partition's next
// owner: the counts waited for are read as applied, which can be before
// the node committed them (effects count once, invocations at least once).
// So the checks below compare the arguments seen with repeats of the same
// invocation folded (slices.Compact): what they check is that no message
// sent after the pause was invoked before the resume, and the order.
//
// TestClusterPauseTypeAcrossKill pauses a function type while one node of
// three is killed with SIGKILL: the answer is the receipt, or a 503 naming
// the partitions it did not reach, and sending it again with its mutation
// id completes it once they moved. Then a pause is answered and another
// node is killed right after. Each time the pause holds on the partitions'
// new owners — their messages queue, nothing is invoked — until the
// resume, after which every message counts once.
func TestClusterPauseTypeAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "counts:3")
	fn, log := orderedCounterFn(t)
	nodes := newClusterNodes(t, dk, "typepausekill", fn, "node-a", "node-b", "node-c")
	launchAll(t, nodes...)
	ids := idPerPartition("tk")
	sendAll(t, nodes, ids, "0")
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	waitCounts(t, nodes, want, 60*time.Second)

	// In the middle: node-c dies while node-a spreads the pause.
	killed := make(chan struct{})
	go func() {
		time.Sleep(5 * time.Millisecond)
		nodes[2].kill()
		close(killed)
	}()
	r, retries := typePause(t, nodes[0], "pause", "kill in the middle", 90*time.Second)
	<-killed
	pause := committedReceipt(t, "pause of kc/counter through node-a while node-c is killed", r)
	t.Logf("the pause answered after %d 503s", retries)
	survivors := nodes[:2]
	waitServing(t, 60*time.Second, survivors...)
	sendAll(t, survivors, ids, "1")
	waitHeld(t, survivors, ids, pause.Mutation, 1)
	for _, id := range ids {
		if got := log.of(id); !slices.Equal(slices.Compact(got), []string{"0"}) {
			t.Errorf("%s invoked with %v while its type is paused; want only the message before the pause", id, got)
		}
	}
	if got := auditCount(t, nodes[0], pause.Mutation); got != 1 {
		t.Errorf("the pause has %d audit records after %d retries; want 1", got, retries)
	}
	r, _ = typePause(t, nodes[1], "resume", "resume", 60*time.Second)
	committedReceipt(t, "resume through node-b", r)
	for _, id := range ids {
		want[id] = 2
	}
	waitCounts(t, survivors, want, 60*time.Second)

	// Just after: the pause is answered, then node-b dies; node-a takes
	// its partitions and the pause holds there.
	r, _ = typePause(t, nodes[0], "pause", "kill just after", 60*time.Second)
	pause = committedReceipt(t, "pause of kc/counter through node-a", r)
	nodes[1].kill()
	last := nodes[:1]
	waitServing(t, 60*time.Second, last...)
	sendAll(t, last, ids, "2")
	waitHeld(t, last, ids, pause.Mutation, 1)
	for _, id := range ids {
		if got := log.of(id); !slices.Equal(slices.Compact(got), []string{"0", "1"}) {
			t.Errorf("%s invoked with %v while its type is paused; want 0 1", id, got)
		}
	}
	r, _ = typePause(t, nodes[0], "resume", "resume", 60*time.Second)
	committedReceipt(t, "resume through node-a", r)
	for _, id := range ids {
		want[id] = 3
	}
	waitCounts(t, last, want, 60*time.Second)
}
