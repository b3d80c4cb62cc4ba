package e2e

// The state access API on every node of a cluster: reads forwarded to the
// owner of the address's partition, listings gathered from every node,
// the hop header, and what a read and a listing answer while a killed
// node's partitions move.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// apiFn serves kc/counter (counts its messages) and kc/flaky (always
// fails, so that its addresses are listed by /failing).
func apiFn(t *testing.T) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("kc/counter"),
		States:       []statefun.ValueSpec{kafkaCount},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int64
			ctx.Storage().Get(kafkaCount, &n)
			ctx.Storage().Set(kafkaCount, n+1)
			return nil
		}),
	})
	if err == nil {
		err = b.WithSpec(statefun.StatefulFunctionSpec{
			FunctionType: statefun.TypeNameFrom("kc/flaky"),
			Function: statefun.StatefulFunctionPointer(func(statefun.Context, statefun.Message) error {
				return errors.New("kc/flaky fails every time")
			}),
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// apiGet sends a GET to node n's admin listener, with extra headers as
// name, value pairs.
func (n *clusterNode) apiGet(path string, header ...string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.admin+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// countOn reads kc/counter/<id>'s count on node n: the value (-1: no
// value) and the status.
func (n *clusterNode) countOn(id string, header ...string) (int64, *http.Response, []byte, error) {
	resp, b, err := n.apiGet("/state/kc/counter/"+id+"/count", append([]string{"Accept", "text/plain"}, header...)...)
	if err != nil {
		return 0, nil, nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, resp, b, err
	case http.StatusNotFound:
		return -1, resp, b, nil
	}
	return 0, resp, b, nil
}

// ownerOf returns the node that owns path's address now: the one that
// answers a GET of it with the hop header (the others answer 503). The
// group's assignment and the node's engine both say so: a node whose
// session still runs a partition the group gave to another node answers
// 503 too.
func ownerOf(t *testing.T, nodes []*clusterNode, path string) *clusterNode {
	t.Helper()
	var owner *clusterNode
	waitFor(t, 30*time.Second, "one node owns "+path, func() bool {
		owner = nil
		for _, n := range nodes {
			resp, _, err := n.apiGet(path, "Statefun-Forwarded", "test")
			if err == nil && (resp.StatusCode == 200 || resp.StatusCode == 404) {
				if owner != nil {
					return false
				}
				owner = n
			}
		}
		return owner != nil
	})
	return owner
}

// listIDs pages through GET /state/kc/<typ>?limit= on node n and returns
// the ids, and the partitions any page said were missing.
func (n *clusterNode) listIDs(t *testing.T, typ string, limit int) ([]string, string) {
	t.Helper()
	return listIDsOn(t, []*clusterNode{n}, typ, limit)
}

// listIDsOn is listIDs asking each page of the next node in turn: a
// cursor one node made is passed to another.
func listIDsOn(t *testing.T, nodes []*clusterNode, typ string, limit int) ([]string, string) {
	t.Helper()
	var ids []string
	missing := ""
	after := ""
	for i := range 100 {
		n := nodes[i%len(nodes)]
		resp, b, err := n.apiGet("/state/kc/" + typ + "?limit=" + strconv.Itoa(limit) + "&after=" + after)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list of kc/%s on %s: %s %s", typ, n.id, resp.Status, b)
		}
		var page struct {
			IDs     []string `json:"ids"`
			Next    *string  `json:"next"`
			Missing []int    `json:"missingPartitions"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		if h := resp.Header.Get("Statefun-Missing-Partitions"); h != "" {
			missing = h
			if len(page.Missing) == 0 {
				t.Errorf("list on %s: header Statefun-Missing-Partitions %q but no missingPartitions in the body", n.id, h)
			}
		}
		if len(page.IDs) > limit {
			t.Errorf("list on %s: a page of %d ids with ?limit=%d", n.id, len(page.IDs), limit)
		}
		ids = append(ids, page.IDs...)
		if page.Next == nil {
			return ids, missing
		}
		after = *page.Next
	}
	t.Fatalf("list of kc/%s: more than 100 pages", typ)
	return nil, ""
}

// TestClusterAPIEveryNode runs three nodes and asks every one of them
// about every address: each counter read from any node equals the messages
// sent to it; the ids of a type, the audit log, /failing, /pauses and a
// mutation's receipt listed from any node cover every partition, paged
// with cursors that work across nodes. A request that carries the hop
// header is answered by its node alone (never forwarded again). Then one
// node is SIGKILLed: reads from the survivors retry while its partitions
// move and end with the same values, and a listing that misses a
// partition says so.
func TestClusterAPIEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := apiFn(t)
	var nodes []*clusterNode
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		n := newClusterNode(t, dk.brokers, "api", id, fn)
		n.launch()
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}
	waitFor(t, 30*time.Second, "every node owns partitions and serves them", func() bool {
		for _, n := range nodes {
			v, err := n.metric("statefun_cluster_owned_partitions")
			if err != nil || v == 0 {
				return false
			}
			if s, _, _ := n.readyz(); s != 200 {
				return false
			}
		}
		return true
	})

	// Each partition is run by one node's session: a node that missed a
	// revocation would run one the group gave to another, and the sum
	// would stay above 8 (docs/explanation/cluster.md, "Moving
	// partitions": an idle node must hear every revocation). A partition between owners may
	// count twice for a moment, so wait for the sum to settle.
	waitFor(t, 30*time.Second, "the nodes' sessions to run 8 partitions in all", func() bool {
		owned, err := sumMetric(nodes, "statefun_cluster_owned_partitions")
		return err == nil && owned == 8
	})

	// GET /cluster, asked of any node, lists the three nodes, each having
	// answered, their serving partitions the 8 in all, as the group's
	// owners say; after traffic (below) each has committed.
	clusterOf := func(n *clusterNode) clusterView {
		resp, b, err := n.apiGet("/cluster")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /cluster on %s: %v %v %s", n.id, err, resp, b)
		}
		var v clusterView
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitFor(t, 30*time.Second, "GET /cluster lists the three nodes serving the 8 partitions", func() bool {
		v := clusterOf(nodes[1])
		serving := 0
		for _, cn := range v.Nodes {
			if !cn.Answered || !cn.Ready {
				return false
			}
			serving += len(cn.Serving)
			for _, p := range cn.Serving {
				if v.Owners[strconv.Itoa(p)] != cn.Node {
					return false
				}
			}
		}
		return len(v.Nodes) == 3 && serving == 8 && len(v.Owners) == 8 && len(v.Unowned) == 0 && v.Partitions == 8 && v.App == "api"
	})

	// The console's cluster page, on one node, shows the three.
	console := &cnEnv{base: "http://" + nodes[0].admin + "/ui/", browser: cnBrowser(t, cnChromium(t)), axe: cnAxe(t),
		shots: filepath.Join(os.TempDir(), "statefun-console-screenshots")}
	if err := os.MkdirAll(console.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	tab := console.tab(t)
	console.goTo(t, tab, "#/cluster", `tr[data-node="node-c"]`)
	waitText(t, tab, "#nav-cluster", "Cluster")
	if n := evaluate[int](t, tab, "node rows", `document.querySelectorAll('tr[data-node]').length`); n != 3 {
		t.Errorf("the cluster page lists %d nodes, want 3", n)
	}
	if u := textOf(t, tab, "[data-unowned]"); u != "—" {
		t.Errorf("the cluster page names unowned partitions %q", u)
	}
	console.shoot(t, tab, "cluster")
	console.checkA11y(t, tab, "cluster")

	// Traffic through every node's ingress.
	const keys = 30
	want := map[string]int{}
	for i := range 120 {
		id := "k" + strconv.Itoa(i%keys)
		n := nodes[i%3]
		if status, err := n.send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("send to %s through %s: %d %v", id, n.id, status, err)
		}
		want[id]++
	}
	for _, id := range []string{"f1", "f2", "f3"} {
		if status, err := nodes[0].send("/kc/flaky/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("send to kc/flaky/%s: %d %v", id, status, err)
		}
	}

	// Every counter, read from every node, has its count.
	var wrong []string
	defer func() {
		if len(wrong) > 0 {
			t.Logf("reads that were wrong last: %s", strings.Join(first(wrong, 20), "; "))
		}
	}()
	waitFor(t, 60*time.Second, "every counter read from every node equals its messages", func() bool {
		wrong = wrong[:0]
		for id, w := range want {
			for _, n := range nodes {
				v, resp, b, err := n.countOn(id)
				if err != nil || resp.StatusCode != 200 || v != int64(w) {
					wrong = append(wrong, fmt.Sprintf("%s on %s: %d (want %d) %v %s", id, n.id, v, w, err, b))
				}
			}
		}
		return len(wrong) == 0
	})
	wrong = nil
	forwarded := 0.0
	for _, n := range nodes {
		v, err := n.metric("statefun_cluster_forwarded_requests_total", `kind="read"`, `outcome="answered"`)
		if err != nil {
			t.Fatal(err)
		}
		forwarded += v
	}
	if forwarded == 0 {
		t.Error("no read was forwarded (statefun_cluster_forwarded_requests_total{kind=\"read\",outcome=\"answered\"} is 0 on every node), yet each node was asked about every address")
	}

	// The ids of kc/counter, paged 7 at a time, from every node.
	wantIDs := make([]string, 0, keys)
	for id := range want {
		wantIDs = append(wantIDs, id)
	}
	sort.Strings(wantIDs)
	for _, n := range nodes {
		ids, missing := n.listIDs(t, "counter", 7)
		if !slices.Equal(ids, wantIDs) || missing != "" {
			t.Errorf("ids of kc/counter listed on %s: %v (missing partitions %q); want %v", n.id, ids, missing, wantIDs)
		}
	}
	if ids, missing := listIDsOn(t, nodes, "counter", 4); !slices.Equal(ids, wantIDs) || missing != "" {
		t.Errorf("ids of kc/counter listed a page on each node in turn: %v (missing partitions %q); want %v", ids, missing, wantIDs)
	}

	// Mutations, applied by the owner of each address (the test sends them
	// there; writes through other nodes are cluster_write_test.go's), are
	// in the audit log and their receipts can be read from every node.
	var muts []string
	for _, id := range []string{"k1", "k2", "k3", "k4"} {
		n := ownerOf(t, nodes, "/state/kc/counter/"+id)
		r := n.api(t, http.MethodPut, "/state/kc/counter/"+id+"/count?ack=committed", "1000",
			"Content-Type", "text/plain", "Statefun-Reason", "api test")
		var rc struct {
			Mutation string `json:"mutation"`
		}
		if r.status/100 != 2 || json.Unmarshal(r.body, &rc) != nil {
			t.Fatalf("the owner of %s did not apply its PUT: %d %s", id, r.status, r.body)
		}
		muts = append(muts, rc.Mutation)
		want[id] = 1000
	}
	sort.Strings(muts)
	for _, n := range nodes {
		resp, b, err := n.apiGet("/audit?limit=3")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("audit on %s: %v %v %s", n.id, err, resp, b)
		}
		var got []string
		for page := 0; ; page++ {
			var p struct {
				Records []struct {
					Mutation string `json:"mutation"`
				} `json:"records"`
				Next *string `json:"next"`
			}
			json.Unmarshal(b, &p)
			if resp.Header.Get("Statefun-Missing-Partitions") != "" {
				t.Errorf("audit on %s: missing partitions %s", n.id, resp.Header.Get("Statefun-Missing-Partitions"))
			}
			for _, r := range p.Records {
				got = append(got, r.Mutation)
			}
			if p.Next == nil || page > 10 {
				break
			}
			if resp, b, err = n.apiGet("/audit?limit=3&after=" + *p.Next); err != nil || resp.StatusCode != 200 {
				t.Fatalf("audit page on %s: %v %s", n.id, err, b)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, muts) {
			t.Errorf("audit log on %s lists %v, want the mutations %v", n.id, got, muts)
		}
		for _, m := range muts {
			for _, q := range []string{"", "?wait=2s"} {
				resp, b, err := n.apiGet("/mutations/" + m + q)
				if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), `"committed"`) {
					t.Errorf("receipt of %s%s on %s: %v %v %s", m, q, n.id, err, resp.Status, b)
				}
			}
		}
		if resp, b, _ := n.apiGet("/mutations/no-such-mutation"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("receipt of an unknown mutation on %s: %s %s; want 404", n.id, resp.Status, b)
		}
		for _, id := range []string{"k1", "k4"} {
			if v, resp, b, _ := n.countOn(id); v != 1000 {
				t.Errorf("%s on %s after the PUT: %d %s %s", id, n.id, v, resp.Status, b)
			}
		}
	}

	// /failing from every node lists the three failing addresses.
	waitFor(t, 30*time.Second, "every node lists kc/flaky f1, f2 and f3 as failing", func() bool {
		for _, n := range nodes {
			resp, b, err := n.apiGet("/failing?limit=2")
			if err != nil || resp.StatusCode != 200 {
				return false
			}
			var ids []string
			for page := 0; page < 5; page++ {
				var p struct {
					Failing []struct {
						ID string `json:"id"`
					} `json:"failing"`
					Next *string `json:"next"`
				}
				json.Unmarshal(b, &p)
				for _, f := range p.Failing {
					ids = append(ids, f.ID)
				}
				if p.Next == nil {
					break
				}
				if resp, b, err = n.apiGet("/failing?limit=2&after=" + *p.Next); err != nil || resp.StatusCode != 200 {
					return false
				}
			}
			if !slices.Equal(ids, []string{"f1", "f2", "f3"}) {
				t.Logf("failing on %s: %v", n.id, ids)
				return false
			}
		}
		return true
	})

	// The inbox of a failing address, read from every node; its head
	// skipped on its owner (repairs through other nodes are
	// cluster_repair_test.go's) is a message dead letter that every node
	// lists and reads.
	for _, n := range nodes {
		if resp, b, err := n.apiGet("/inbox/kc/flaky/f2"); err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), `"inflight"`) {
			t.Errorf("inbox of kc/flaky/f2 on %s: %v %v %s", n.id, err, resp.Status, b)
		}
	}
	r := ownerOf(t, nodes, "/inbox/kc/flaky/f1").api(t, http.MethodPost, "/inbox/kc/flaky/f1/skip", `{"reason":"api test"}`,
		"Content-Type", "application/json")
	var skipped struct {
		DeadLetter string `json:"deadLetter"`
	}
	if r.status/100 != 2 || json.Unmarshal(r.body, &skipped) != nil || skipped.DeadLetter == "" {
		t.Fatalf("the owner of kc/flaky/f1 did not skip the head of its inbox: %d %s", r.status, r.body)
	}
	deadLetter := skipped.DeadLetter
	for _, n := range nodes {
		resp, b, err := n.apiGet("/dead-letters/messages")
		var page struct {
			DeadLetters []struct {
				ID string `json:"id"`
			} `json:"deadLetters"`
		}
		if err == nil {
			json.Unmarshal(b, &page)
		}
		if err != nil || resp.StatusCode != 200 || len(page.DeadLetters) != 1 || page.DeadLetters[0].ID != deadLetter {
			t.Errorf("message dead letters on %s: %v %s; want %s", n.id, err, b, deadLetter)
		}
		if resp, b, err := n.apiGet("/dead-letters/messages/" + deadLetter); err != nil || resp.StatusCode != 200 {
			t.Errorf("dead letter %s on %s: %v %s", deadLetter, n.id, err, b)
		}
	}

	// A pause set on its owner is listed by every node.
	pauseOwner := ownerOf(t, nodes, "/inbox/kc/flaky/f3")
	req, _ := http.NewRequest(http.MethodPost, "http://"+pauseOwner.admin+"/pause/kc/flaky/f3", strings.NewReader(`{"reason":"api test"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("pause of kc/flaky/f3 on its owner %s: %v %v", pauseOwner.id, err, resp)
	} else {
		resp.Body.Close()
	}
	for _, n := range nodes {
		resp, b, err := n.apiGet("/pauses")
		var out struct {
			Pauses []struct {
				ID *string `json:"id"`
			} `json:"pauses"`
		}
		if err == nil {
			json.Unmarshal(b, &out)
		}
		if err != nil || resp.StatusCode != 200 || len(out.Pauses) != 1 || out.Pauses[0].ID == nil || *out.Pauses[0].ID != "f3" {
			t.Errorf("pauses on %s: %v %s; want kc/flaky/f3's", n.id, err, b)
		}
	}

	// The hop header: a request another node forwarded is answered here
	// alone. On a node that does not own the address: 503 naming the
	// owner, and no forwarded read counted.
	for id := range want {
		var owners, others []*clusterNode
		for _, n := range nodes {
			_, resp, _, err := n.countOn(id, "Statefun-Forwarded", "test")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode == 200 {
				owners = append(owners, n)
			} else {
				others = append(others, n)
			}
		}
		if len(owners) != 1 {
			t.Fatalf("read of %s with the hop header: %d nodes answered 200, want only its owner (a request forwarded once is not forwarded again)", id, len(owners))
		}
		owner, other := owners[0], others[0]
		before, _ := other.metric("statefun_cluster_forwarded_requests_total", `kind="read"`)
		_, resp, b, _ := other.countOn(id, "Statefun-Forwarded", "test")
		var pr stateProblem
		json.Unmarshal(b, &pr)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || pr.OwnerNode != owner.id || pr.OwnerURL != "http://"+owner.admin {
			t.Errorf("read of %s with the hop header on %s (not its owner): %s %s; want 503 naming %s", id, other.id, resp.Status, b, owner.id)
		}
		if after, _ := other.metric("statefun_cluster_forwarded_requests_total", `kind="read"`); after != before {
			t.Errorf("%s forwarded a request that carried the hop header (forwarded reads %v, then %v)", other.id, before, after)
		}
		// Without it, the same node answers, through the owner.
		if v, resp, b, _ := other.countOn(id); resp.StatusCode != 200 || v != int64(want[id]) {
			t.Errorf("read of %s on %s (not its owner): %s %s; want %d", id, other.id, resp.Status, b, want[id])
		}
		break
	}

	// SIGKILL node-c. Until its partitions moved (the group's session
	// times out after 6 s, then they are restored), reads of its
	// addresses from the survivors retry, then answer 503 with
	// Retry-After; never another status or a wrong value. A listing says
	// which partitions it misses.
	nodes[2].kill()
	t.Log("killed node-c")
	survivors := nodes[:2]
	// At once: node-c's partitions have no reachable owner for the whole
	// budget (the group notices after 6 s), so this listing names them.
	if ids, missing := survivors[0].listIDs(t, "counter", 100); !slices.Equal(ids, wantIDs) && missing == "" {
		t.Errorf("ids listed on %s right after the kill: %d of %d, and no partition named missing", survivors[0].id, len(ids), len(wantIDs))
	} else {
		t.Logf("ids listed on %s right after the kill: %d of %d, missing partitions %q", survivors[0].id, len(ids), len(wantIDs), missing)
	}
	deadline := time.Now().Add(90 * time.Second)
	pending := map[string]bool{}
	for id := range want {
		pending[id] = true
	}
	retried, partial := 0, 0
	for len(pending) > 0 && time.Now().Before(deadline) {
		// Each read may retry for a few seconds: all at once.
		type result struct {
			id  string
			ok  bool
			bad string
		}
		results := make(chan result)
		for id := range pending {
			for _, n := range survivors {
				go func() {
					v, resp, b, err := n.countOn(id)
					switch {
					case err != nil:
						results <- result{id: id, bad: err.Error()}
					case resp.StatusCode == 200 && v == int64(want[id]):
						results <- result{id: id, ok: true}
					case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
						results <- result{id: id}
					default:
						results <- result{id: id, bad: fmt.Sprintf("read of %s on %s during the move: %s %q (value %d, want %d)", id, n.id, resp.Status, b, v, want[id])}
					}
				}()
			}
		}
		okCount := map[string]int{}
		for range len(pending) * len(survivors) {
			r := <-results
			if r.bad != "" {
				t.Fatal(r.bad)
			}
			if r.ok {
				okCount[r.id]++
			} else {
				retried++
			}
		}
		for id, c := range okCount {
			if c == len(survivors) {
				delete(pending, id)
			}
		}
		for _, n := range survivors {
			ids, missing := n.listIDs(t, "counter", 100)
			if !slices.Equal(ids, wantIDs) && missing == "" {
				t.Errorf("ids listed on %s during the move: %d of %d, and no partition named missing", n.id, len(ids), len(wantIDs))
			}
			if missing != "" {
				partial++
			}
		}
	}
	if len(pending) > 0 {
		t.Fatalf("after the move, %d counters are not read right from both survivors: %v", len(pending), pending)
	}
	t.Logf("during the move: %d reads answered 503 (after retrying), %d listings named missing partitions", retried, partial)
	for _, n := range survivors {
		ids, missing := n.listIDs(t, "counter", 7)
		if !slices.Equal(ids, wantIDs) || missing != "" {
			t.Errorf("ids listed on %s after the move: %v (missing %q)", n.id, ids, missing)
		}
	}
}

// clusterView is GET /cluster's answer, as the e2e tests read it.
type clusterView struct {
	App        string
	Partitions int
	Owners     map[string]string
	Unowned    []int
	Nodes      []struct {
		Node       string
		Answered   bool
		Ready      bool
		Serving    []int
		Commits    int64
		LastCommit *time.Time
	}
}
