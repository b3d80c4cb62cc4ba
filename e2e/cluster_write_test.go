package e2e

// The write side of the state API in cluster mode, end to end: writes sent
// to a node that does not own the address travel the messages topic as
// commands and are applied by the owner, once, including across a SIGKILL
// of the owner.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/members"
)

// longType is the typename the official SDK registers kc/counter's count
// under.
const longType = "io.statefun.types/long"

// stateReply is a state API answer: status, headers, body.
type stateReply struct {
	status int
	header http.Header
	body   []byte
}

// receipt is a mutation's receipt (docs/reference/state-api.md).
type receipt struct {
	Mutation        string  `json:"mutation"`
	Status          string  `json:"status"`
	Checkpoint      *uint64 `json:"checkpoint"`
	Version         *string `json:"version"`
	PreviousVersion *string `json:"previousVersion"`
	Rejection       string  `json:"rejection"`
	Commit          string  `json:"commit"`
}

// writeProblem is the problem of a rejected write.
type writeProblem struct {
	Status         int      `json:"status"`
	Detail         string   `json:"detail"`
	CurrentVersion *string  `json:"currentVersion"`
	Receipt        *receipt `json:"receipt"`
}

// api sends a state API request to node n.
func (n *clusterNode) api(t *testing.T, method, path, body string, hdr ...string) stateReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+n.admin+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		return stateReply{status: 0, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return stateReply{status: resp.StatusCode, header: resp.Header, body: b}
}

// putCount writes kc/counter/<id>'s count as text through node n.
func (n *clusterNode) putCount(t *testing.T, id string, v int, query string, hdr ...string) stateReply {
	t.Helper()
	hdr = append([]string{"Content-Type", "text/plain", "Statefun-Type", longType}, hdr...)
	return n.api(t, http.MethodPut, "/state/kc/counter/"+url.PathEscape(id)+"/count"+query, strconv.Itoa(v), hdr...)
}

// owners returns the node that owns each partition of application app,
// from the consumer group's assignment.
func owners(t *testing.T, brokers, app string) map[int32]string {
	o, _ := ownership(t, brokers, app)
	return o
}

// ownership is owners and the group's state.
func ownership(t testing.TB, brokers, app string) (map[int32]string, string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := members.Owners(ctx, kadm.NewClient(cl), &clusterconfig.Config{AppID: app})
	if err != nil {
		t.Fatal(err)
	}
	return o.Owners, o.State
}

// idsOwnedBy returns n ids of kc/counter, starting with prefix, whose
// partition (of 8) node owns.
func idsOwnedBy(own map[int32]string, node, prefix string, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 10000; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		if own[int32(address.Partition(id, 8))] == node {
			out = append(out, id)
		}
	}
	return out
}

// startWriteCluster starts devkafka and three nodes of application app and
// waits until each serves partitions.
func startWriteCluster(t *testing.T, app string) (string, []*clusterNode) {
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	return dk.brokers, startApp(t, dk.brokers, fn, app, "node-a", "node-b", "node-c")
}

// startApp starts nodes ids of application app on brokers, serving the
// functions at fn, and waits until each serves partitions and the
// assignment holds.
func startApp(t testing.TB, brokers, fn, app string, ids ...string) []*clusterNode {
	var nodes []*clusterNode
	for _, id := range ids {
		n := newClusterNode(t, brokers, app, id, fn)
		n.launch()
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}
	// The same assignment twice, a second apart, in a stable group: a
	// cooperative rebalance moves partitions in more than one round.
	var last string
	waitFor(t, 60*time.Second, "every node owns partitions and serves them, and the assignment holds", func() bool {
		own, state := ownership(t, brokers, app)
		if len(own) != 8 || state != "Stable" {
			return false
		}
		if cur := fmt.Sprint(own); cur != last {
			last = cur
			time.Sleep(time.Second)
			return false
		}
		for _, n := range nodes {
			if v, err := n.metric("statefun_cluster_owned_partitions"); err != nil || v == 0 {
				return false
			}
			if s, _, _ := n.readyz(); s != 200 {
				return false
			}
		}
		return true
	})
	return nodes
}

func byID(nodes []*clusterNode, id string) *clusterNode {
	for _, n := range nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// historyLen returns the number of history records of kc/counter/<id>'s
// count, read from node n (its owner).
func historyLen(t *testing.T, n *clusterNode, id string) (int, bool) {
	t.Helper()
	r := n.api(t, http.MethodGet, "/state/kc/counter/"+url.PathEscape(id)+"/count/history", "")
	if r.status != 200 {
		return 0, false
	}
	var page struct {
		Records []json.RawMessage `json:"records"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatalf("history of %s: %v: %s", id, err, r.body)
	}
	return len(page.Records), true
}

// auditOf returns the audit records of mutation mid, read from node n.
func auditOf(t *testing.T, n *clusterNode, mid string) []map[string]any {
	t.Helper()
	r := n.api(t, http.MethodGet, "/audit?mutation="+url.QueryEscape(mid), "")
	if r.status != 200 {
		t.Fatalf("GET /audit?mutation=%s on %s: %d %s", mid, n.id, r.status, r.body)
	}
	var page struct {
		Records []map[string]any `json:"records"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	return page.Records
}

// storedReceipt reads mutation mid's receipt from node n, waiting for it to
// be final.
func storedReceipt(t *testing.T, n *clusterNode, mid string) (receipt, int) {
	t.Helper()
	r := n.api(t, http.MethodGet, "/mutations/"+url.PathEscape(mid)+"?wait=10s", "")
	var rc receipt
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &rc); err != nil {
			t.Fatal(err)
		}
	}
	return rc, r.status
}

// TestClusterWritesFromEveryNode sends writes to every node for addresses
// owned by the other two: each travels the messages topic as a command and
// the owner applies it. Committed and applied writes answer the owner's
// final receipt, accepted ones 202 with Location once Kafka has the
// command; the values read from the owner are the ones written; the
// receipts and audit records are on the owner. An If-Match that does not
// hold, evaluated by the owner, reaches the client as 412 with the current
// version; a typename the function did not register is a 409.
func TestClusterWritesFromEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	brokers, nodes := startWriteCluster(t, "writes")
	own := owners(t, brokers, "writes")

	v := 100
	for _, sender := range nodes {
		for _, owner := range nodes {
			if owner == sender {
				continue
			}
			ids := idsOwnedBy(own, owner.id, "w-"+sender.id+"-", 4)
			if len(ids) < 4 {
				t.Fatalf("no ids owned by %s", owner.id)
			}
			for i, ack := range []string{"committed", "applied", "accepted"} {
				id := ids[i]
				v++
				r := sender.putCount(t, id, v, "?ack="+ack)
				var rc receipt
				json.Unmarshal(r.body, &rc)
				switch ack {
				case "accepted":
					if r.status != http.StatusAccepted || rc.Status != "accepted" || r.header.Get("Location") != "/mutations/"+rc.Mutation {
						t.Fatalf("PUT ?ack=accepted of %s (owned by %s) through %s: %d %s, Location %q; want 202, status accepted and the receipt's Location",
							id, owner.id, sender.id, r.status, r.body, r.header.Get("Location"))
					}
				default:
					// ack=applied through another node answers once the
					// owner's receipt is final: committed.
					if r.status != http.StatusOK || rc.Status != "committed" || rc.Version == nil || rc.Checkpoint == nil || rc.Commit == "" {
						t.Fatalf("PUT ?ack=%s of %s (owned by %s) through %s: %d %s; want 200 with a committed receipt", ack, id, owner.id, sender.id, r.status, r.body)
					}
					if r.header.Get("ETag") != `"`+*rc.Version+`"` {
						t.Errorf("PUT ?ack=%s through %s: ETag %q, want the receipt's version %s", ack, sender.id, r.header.Get("ETag"), *rc.Version)
					}
				}
				// The owner has the value, the receipt and the audit record.
				stored, status := storedReceipt(t, owner, rc.Mutation)
				if status != 200 || stored.Status != "committed" {
					t.Fatalf("receipt of %s (ack=%s, through %s) on its owner %s: %d %+v; want committed; owners now %v", rc.Mutation, ack, sender.id, owner.id, status, stored, owners(t, brokers, "writes"))
				}
				if ack != "accepted" && *stored.Version != *rc.Version {
					t.Errorf("receipt of %s: the owner says version %s, the writer was answered %s", rc.Mutation, *stored.Version, *rc.Version)
				}
				if got, status, _, _, err := owner.readCount(id); err != nil || status != 200 || got != int64(v) {
					t.Errorf("%s read from its owner %s after a write through %s: %d (status %d, %v); want %d", id, owner.id, sender.id, got, status, err, v)
				}
				if recs := auditOf(t, owner, rc.Mutation); len(recs) != 1 || recs[0]["principal"] != "anonymous" || recs[0]["id"] != id {
					t.Errorf("audit records of %s on its owner %s: %v; want one, for %s", rc.Mutation, owner.id, recs, id)
				}
			}

			// Conditions are evaluated by the owner at the command's turn.
			id := ids[0]
			cur, _ := storedReceiptVersion(t, owner, id)
			r := sender.putCount(t, id, 1, "", "If-Match", `"1"`)
			var pr writeProblem
			json.Unmarshal(r.body, &pr)
			if r.status != http.StatusPreconditionFailed || pr.CurrentVersion == nil || *pr.CurrentVersion != cur ||
				pr.Receipt == nil || pr.Receipt.Status != "rejected" || pr.Receipt.Rejection != "precondition" || r.header.Get("ETag") != `"`+cur+`"` {
				t.Errorf("PUT with a stale If-Match of %s through %s: %d %s, ETag %q; want 412 naming the current version %s", id, sender.id, r.status, r.body, r.header.Get("ETag"), cur)
			}
			r = sender.putCount(t, id, 2, "", "If-None-Match", "*")
			if r.status != http.StatusPreconditionFailed {
				t.Errorf("PUT with If-None-Match: * of %s, which has a value, through %s: %d %s; want 412", id, sender.id, r.status, r.body)
			}
			r = sender.putCount(t, id, 3, "", "If-Match", `"`+cur+`"`)
			if r.status != http.StatusOK {
				t.Errorf("PUT with the current If-Match of %s through %s: %d %s; want 200", id, sender.id, r.status, r.body)
			}
			// Deletes of an entry and of an address.
			r = sender.api(t, http.MethodDelete, "/state/kc/counter/"+url.PathEscape(ids[1])+"/count", "")
			if r.status != http.StatusOK {
				t.Errorf("DELETE of %s's count through %s: %d %s; want 200", ids[1], sender.id, r.status, r.body)
			}
			if _, status, _, _, _ := owner.readCount(ids[1]); status != 200 {
				t.Errorf("read of %s from its owner after a delete: %d", ids[1], status)
			} else if got, _, _, _, _ := owner.readCount(ids[1]); got != -1 {
				t.Errorf("%s after a delete through %s: %d, want no value", ids[1], sender.id, got)
			}
			r = sender.api(t, http.MethodDelete, "/state/kc/counter/"+url.PathEscape(ids[1])+"/count", "")
			if r.status != http.StatusNotFound {
				t.Errorf("DELETE of %s's count, which has no value, through %s: %d %s; want 404 (the owner's rejected receipt)", ids[1], sender.id, r.status, r.body)
			}
			r = sender.api(t, http.MethodDelete, "/state/kc/counter/"+url.PathEscape(ids[2]), "")
			if r.status != http.StatusOK {
				t.Errorf("DELETE of the address %s through %s: %d %s; want 200", ids[2], sender.id, r.status, r.body)
			}
			if got, _, _, _, _ := owner.readCount(ids[2]); got != -1 {
				t.Errorf("%s after a delete of its address through %s: %d, want no value", ids[2], sender.id, got)
			}
		}
	}

	// A message makes the function register its state on the owner; then
	// a typename other than the registered one is a 409 (found at the
	// edge when the edge knows the spec, by the owner otherwise).
	id := idsOwnedBy(own, "node-c", "typed-", 1)[0]
	if status, err := nodes[0].send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != 200 {
		t.Fatalf("send: %d %v", status, err)
	}
	waitFor(t, 20*time.Second, "the message is counted", func() bool {
		got, status, _, _, _ := nodes[2].readCount(id)
		return status == 200 && got == 1
	})
	r := nodes[0].api(t, http.MethodPut, "/state/kc/counter/"+id+"/count", "x", "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string")
	if r.status != http.StatusConflict {
		t.Errorf("PUT of a string into %s's long count through node-a: %d %s; want 409", id, r.status, r.body)
	}
	// An octet-stream value without a typename takes the owner's
	// registered one.
	r = nodes[0].api(t, http.MethodPut, "/state/kc/counter/"+id+"/count", "\x00\x00\x00\x00\x00\x00\x00\x07", "Content-Type", "application/octet-stream")
	if r.status != http.StatusOK {
		t.Errorf("PUT of an octet-stream value without a typename through node-a: %d %s; want 200", r.status, r.body)
	}
}

// storedReceiptVersion returns the current version of kc/counter/<id>'s
// count, from its owner's ETag.
func storedReceiptVersion(t *testing.T, owner *clusterNode, id string) (string, bool) {
	t.Helper()
	r := owner.api(t, http.MethodGet, "/state/kc/counter/"+url.PathEscape(id)+"/count", "", "Accept", "text/plain")
	if r.status != 200 {
		t.Fatalf("GET of %s on its owner %s: %d %s", id, owner.id, r.status, r.body)
	}
	return strings.Trim(r.header.Get("ETag"), `"`), true
}

// TestClusterWriteDuringMove kills the owner of some addresses with
// SIGKILL and at once writes them, committed, through the other nodes. The
// receiving node produces each write's command, waits for the owner's
// receipt, and produces the command again when the partition moves. Each
// write either succeeds or fails clearly (503 naming its receipt), and
// applies exactly once: one history record and one audit record per entry,
// read from the new owner. A write forwarded and committed before the kill
// keeps its receipt and audit record on the new owner.
func TestClusterWriteDuringMove(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	brokers, nodes := startWriteCluster(t, "wmove")
	own := owners(t, brokers, "wmove")
	victim := nodes[2]

	// Before the kill: a write through node-a, applied by node-c.
	before := idsOwnedBy(own, victim.id, "before-", 1)[0]
	r := nodes[0].putCount(t, before, 41, "")
	var rcBefore receipt
	json.Unmarshal(r.body, &rcBefore)
	if r.status != 200 || rcBefore.Status != "committed" {
		t.Fatalf("PUT of %s through node-a before the kill: %d %s", before, r.status, r.body)
	}

	ids := idsOwnedBy(own, victim.id, "move-", 6)
	victim.kill()
	t.Log("killed", victim.id)

	type outcome struct {
		status int
		rc     receipt
		body   string
		loc    string
	}
	outcomes := make([]outcome, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := nodes[i%2].putCount(t, id, 1000+i, "")
			o := outcome{status: r.status, body: string(r.body), loc: r.header.Get("Location")}
			json.Unmarshal(r.body, &o.rc)
			outcomes[i] = o
		}()
	}
	wg.Wait()

	survivors := nodes[:2]
	waitFor(t, 60*time.Second, "the survivors own every partition", func() bool {
		o := owners(t, brokers, "wmove")
		if len(o) != 8 {
			return false
		}
		for _, n := range o {
			if n == victim.id {
				return false
			}
		}
		own = o
		return true
	})
	for i, id := range ids {
		o := outcomes[i]
		newOwner := byID(survivors, own[int32(address.Partition(id, 8))])
		switch o.status {
		case http.StatusOK:
			if o.rc.Status != "committed" {
				t.Errorf("PUT of %s during the move: 200 with %s", id, o.body)
			}
		case http.StatusServiceUnavailable:
			// Failed clearly: the answer names the receipt to follow.
			if o.loc == "" {
				t.Errorf("PUT of %s during the move: 503 without the receipt's Location: %s", id, o.body)
			}
			t.Logf("PUT of %s during the move: 503 %s", id, o.body)
		default:
			t.Errorf("PUT of %s during the move: %d %s; want 200, or 503 naming its receipt", id, o.status, o.body)
		}
		var n int
		waitFor(t, 60*time.Second, "the history of "+id+" on its new owner", func() bool {
			var ok bool
			n, ok = historyLen(t, newOwner, id)
			return ok && n > 0
		})
		if n != 1 {
			t.Errorf("%s has %d history records on its new owner %s after one write during the move; want 1 (applied once)", id, n, newOwner.id)
		}
		if got, status, _, _, _ := newOwner.readCount(id); status != 200 || got != int64(1000+i) {
			t.Errorf("%s on its new owner %s: %d (status %d), want %d", id, newOwner.id, got, status, 1000+i)
		}
		if o.status == http.StatusOK {
			if recs := auditOf(t, newOwner, o.rc.Mutation); len(recs) != 1 {
				t.Errorf("audit records of %s (%s) on the new owner %s: %d, want 1", o.rc.Mutation, id, newOwner.id, len(recs))
			}
			if rc, status := storedReceipt(t, newOwner, o.rc.Mutation); status != 200 || rc.Status != "committed" {
				t.Errorf("receipt of %s on the new owner: %d %+v", o.rc.Mutation, status, rc)
			}
		}
	}

	// The write applied by the killed node: its receipt and audit record
	// moved with the partition.
	newOwner := byID(survivors, own[int32(address.Partition(before, 8))])
	if rc, status := storedReceipt(t, newOwner, rcBefore.Mutation); status != 200 || rc.Status != "committed" || *rc.Version != *rcBefore.Version {
		t.Errorf("receipt of %s (applied by %s before its kill) on the new owner %s: %d %+v; want committed, version %s", rcBefore.Mutation, victim.id, newOwner.id, status, rc, *rcBefore.Version)
	}
	if recs := auditOf(t, newOwner, rcBefore.Mutation); len(recs) != 1 || recs[0]["id"] != before {
		t.Errorf("audit records of %s on the new owner %s: %v; want one for %s", rcBefore.Mutation, newOwner.id, recs, before)
	}
	if got, _, _, _, _ := newOwner.readCount(before); got != 41 {
		t.Errorf("%s on the new owner: %d, want 41", before, got)
	}
}
