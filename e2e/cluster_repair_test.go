package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The repair actions that do not travel as commands — pause, resume,
// delete-address — work from any node in cluster mode: a node that does
// not own the address sends the request to the owner once and passes its
// answer back, and the audit log, gathered from any node, tells the story.
func TestClusterRepairFromAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "repair", fn, "node-a", "node-b", "node-c")
	launchAll(t, nodes...)
	call := func(n *clusterNode, method, path, body string, hop bool) (int, string) {
		t.Helper()
		var h []string
		if body != "" {
			h = append(h, "Content-Type", "application/json")
		}
		if hop {
			h = append(h, "Statefun-Forwarded", "test")
		}
		r := n.api(t, method, path, body, h...)
		return r.status, string(r.body)
	}
	const id = "r1"
	for range 2 {
		if status, err := nodes[0].send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("message: %d %v", status, err)
		}
	}
	waitCounts(t, nodes, map[string]int{id: 2}, 30*time.Second)
	owner := ownerOf(t, nodes, "/state/kc/counter/"+id)
	var others []*clusterNode
	for _, n := range nodes {
		if n != owner {
			others = append(others, n)
		}
	}

	if status, body := call(others[0], "POST", "/pause/kc/counter/"+id, `{"reason":"investigate"}`, false); status != http.StatusOK {
		t.Fatalf("pause from %s (not the owner): %d %s", others[0].id, status, body)
	}
	for range 3 {
		if status, err := others[1].send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("message: %d %v", status, err)
		}
	}
	var in struct {
		Paused *struct {
			Reason string `json:"reason"`
		} `json:"paused"`
		Queued struct {
			Count int `json:"count"`
		} `json:"queued"`
	}
	waitFor(t, 30*time.Second, "three messages queued behind the pause, read from a non-owner", func() bool {
		status, body := call(others[1], "GET", "/inbox/kc/counter/"+id, "", false)
		return status == 200 && json.Unmarshal([]byte(body), &in) == nil && in.Paused != nil && in.Queued.Count == 3
	})
	if v, ok := count(t, nodes, id); !ok || v != 2 {
		t.Fatalf("%s while paused = %d (%v); want 2", id, v, ok)
	}
	if status, body := call(others[1], "POST", "/resume/kc/counter/"+id, `{"reason":"fixed"}`, false); status != http.StatusOK {
		t.Fatalf("resume from %s (not the owner): %d %s", others[1].id, status, body)
	}
	waitCounts(t, nodes, map[string]int{id: 5}, 30*time.Second)

	// A request another node sent on is not sent on again.
	if status, _ := call(others[0], "POST", "/pause/kc/counter/"+id, `{"reason":"x"}`, true); status != http.StatusServiceUnavailable {
		t.Errorf("a hop-marked pause on a non-owner: %d; want 503", status)
	}

	// The overview, from any node, counts the state of every partition
	// once: r1 and four more ids, wherever they live.
	want := map[string]int{id: 5}
	for _, other := range []string{"o1", "o2", "o3", "o4"} {
		if status, err := nodes[0].send("/kc/counter/"+other, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("message: %d %v", status, err)
		}
		want[other] = 1
	}
	waitCounts(t, nodes, want, 30*time.Second)
	// Reads see an applied write at once; the overview counts durable
	// state, which follows with the next commit.
	for _, n := range nodes {
		var got int
		var missing []int
		waitFor(t, 30*time.Second, "the overview from "+n.id+" counting 5 kc/counter addresses", func() bool {
			status, body := call(n, "GET", "/overview", "", false)
			var ov struct {
				Types []struct {
					Namespace string `json:"namespace"`
					Type      string `json:"type"`
					Addresses int    `json:"addresses"`
				} `json:"types"`
				Missing []int `json:"missingPartitions"`
			}
			if status != 200 || json.Unmarshal([]byte(body), &ov) != nil {
				return false
			}
			got, missing = -1, ov.Missing
			for _, ty := range ov.Types {
				if ty.Namespace == "kc" && ty.Type == "counter" {
					got = ty.Addresses
				}
			}
			return got == 5 && len(missing) == 0
		})
	}

	// Delete the address from a non-owner (it must be paused first).
	if status, body := call(others[1], "POST", "/pause/kc/counter/"+id, `{"reason":"retire"}`, false); status != http.StatusOK {
		t.Fatalf("pause: %d %s", status, body)
	}
	if status, body := call(others[0], "DELETE", "/addresses/kc/counter/"+id, `{"reason":"retire the address"}`, false); status != http.StatusOK {
		t.Fatalf("delete-address from %s (not the owner): %d %s", others[0].id, status, body)
	}
	if v, ok := count(t, nodes, id); !ok || v != -1 {
		t.Fatalf("%s after delete-address = %d (%v); want no state", id, v, ok)
	}
	// The audit log, gathered from any node, has the three actions of
	// this address.
	status, body := call(others[0], "GET", "/audit?order=newest&limit=50", "", false)
	for _, want := range []string{"investigate", "fixed", "retire the address"} {
		if status != 200 || !strings.Contains(body, want) {
			t.Errorf("audit from %s: %d, no record with reason %q: %s", others[0].id, status, want, body)
		}
	}
}

// countsOf returns the values of the records keyed key in the Kafka
// egress topic "counts", read_committed, in offset order.
func countsOf(t *testing.T, brokers, key string) []string {
	t.Helper()
	var out []string
	for _, rec := range kcatRead(t, brokers, "counts") {
		if rec.Key != nil && *rec.Key == key && rec.Payload != nil {
			out = append(out, *rec.Payload)
		}
	}
	return out
}

// skipBehindPause pauses kc/counter/<id> through node n, sends it a
// message through node via, waits until the message is queued and skips
// it through via: it returns the dead letter's id. The address stays
// paused.
func skipBehindPause(t *testing.T, n, via *clusterNode, id string) string {
	t.Helper()
	if r := n.api(t, http.MethodPost, "/pause/kc/counter/"+id, `{"reason":"hold"}`, "Content-Type", "application/json"); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if status, err := via.send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
		t.Fatalf("message: %d %v", status, err)
	}
	waitFor(t, 30*time.Second, "the message queued behind the pause", func() bool {
		r := n.api(t, http.MethodGet, "/inbox/kc/counter/"+id, "")
		var in struct {
			Queued struct {
				Count int `json:"count"`
			} `json:"queued"`
		}
		return r.status == 200 && json.Unmarshal(r.body, &in) == nil && in.Queued.Count == 1
	})
	r := via.api(t, http.MethodPost, "/inbox/kc/counter/"+id+"/skip", `{"reason":"later"}`, "Content-Type", "application/json")
	var skip struct {
		DeadLetter string `json:"deadLetter"`
	}
	if err := json.Unmarshal(r.body, &skip); err != nil || r.status != http.StatusOK || skip.DeadLetter == "" {
		t.Fatalf("skip: %d %s", r.status, r.body)
	}
	return skip.DeadLetter
}

// A revert and a re-send of a message dead letter work from any node in
// cluster mode: the mutation id names no address, so a node that does not
// hold the receipt or dead letter finds the node that does (it reads it
// from every node) and sends the change to it once. The answers are
// embedded mode's: the revert's receipt, 412 when the entry moved on, 404
// for an unknown id or a dead letter re-sent already; and the re-sent
// message runs once (its count on the Kafka egress once).
func TestClusterRevertAndResendFromAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	brokers, nodes := startWriteCluster(t, "revert")
	own := owners(t, brokers, "revert")
	owner := nodes[0]
	ids := idsOwnedBy(own, owner.id, "rv", 1)
	if len(ids) == 0 {
		t.Fatalf("no id owned by %s in %v", owner.id, own)
	}
	id := ids[0]
	others := nodes[1:]
	problemOf := func(r stateReply) writeProblem {
		var pr writeProblem
		json.Unmarshal(r.body, &pr)
		return pr
	}
	everyNodeReads := func(want int64) {
		t.Helper()
		for _, n := range nodes {
			if v, status, pr, _, err := n.readCount(id); err != nil || status != 200 || v != want {
				t.Errorf("count of %s read from %s: %d (status %d %+v, %v); want %d", id, n.id, v, status, pr, err, want)
			}
		}
	}

	for range 2 {
		if status, err := owner.send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("message: %d %v", status, err)
		}
	}
	waitCounts(t, nodes, map[string]int{id: 2}, 30*time.Second)

	// A write, then its revert sent to the other non-owner.
	w := others[0].putCount(t, id, 100, "")
	var put receipt
	if err := json.Unmarshal(w.body, &put); err != nil || w.status != http.StatusOK || put.Status != "committed" {
		t.Fatalf("PUT from %s: %d %s", others[0].id, w.status, w.body)
	}
	everyNodeReads(100)
	r := others[1].api(t, http.MethodPost, "/mutations/"+put.Mutation+"/revert", "", "Statefun-Reason", "undo from "+others[1].id)
	var rev receipt
	if err := json.Unmarshal(r.body, &rev); err != nil || r.status != http.StatusOK || rev.Status != "committed" || rev.Mutation == "" {
		t.Fatalf("revert from %s (not the owner): %d %s", others[1].id, r.status, r.body)
	}
	everyNodeReads(2)
	recs := auditOf(t, others[0], rev.Mutation)
	if len(recs) != 1 || recs[0]["reverts"] != put.Mutation || recs[0]["reason"] != "undo from "+others[1].id || recs[0]["op"] != "put" {
		t.Errorf("the revert's audit record, from %s: %v", others[0].id, recs)
	}
	if rc, status := storedReceipt(t, others[0], rev.Mutation); status != 200 || rc.Status != "committed" {
		t.Errorf("the revert's receipt from %s: %d %+v", others[0].id, status, rc)
	}
	// Again, from the other non-owner: the entry moved on, embedded mode's
	// 412 with the rejected receipt; nothing changes.
	r = others[0].api(t, http.MethodPost, "/mutations/"+put.Mutation+"/revert", "")
	if pr := problemOf(r); r.status != http.StatusPreconditionFailed || pr.Receipt == nil || pr.Receipt.Status != "rejected" {
		t.Errorf("second revert from %s: %d %s; want 412 with the rejected receipt", others[0].id, r.status, r.body)
	}
	everyNodeReads(2)
	for _, n := range others {
		if r := n.api(t, http.MethodPost, "/mutations/no-such-mutation/revert", ""); r.status != http.StatusNotFound {
			t.Errorf("revert of an unknown id from %s: %d %s; want 404", n.id, r.status, r.body)
		}
	}

	// A dead letter: pause, a message queued behind the pause, skipped,
	// resumed; then re-sent from a node that does not own the address.
	deadLetter := skipBehindPause(t, others[0], others[1], id)
	if r := others[0].api(t, http.MethodPost, "/resume/kc/counter/"+id, ""); r.status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	everyNodeReads(2)
	resend := "/dead-letters/messages/" + url.PathEscape(deadLetter) + "/resend"
	r = others[0].api(t, http.MethodPost, resend, `{"reason":"now"}`, "Content-Type", "application/json")
	var sent struct {
		Mutation string `json:"mutation"`
		Status   string `json:"status"`
		Address  struct {
			ID string `json:"id"`
		} `json:"address"`
		InboxKey string `json:"inboxKey"`
	}
	if err := json.Unmarshal(r.body, &sent); err != nil || r.status != http.StatusOK || sent.Status != "committed" || sent.Address.ID != id || sent.InboxKey == "" {
		t.Fatalf("re-send from %s (not the owner): %d %s", others[0].id, r.status, r.body)
	}
	waitCounts(t, nodes, map[string]int{id: 3}, 30*time.Second)
	if r := others[1].api(t, http.MethodPost, resend, ""); r.status != http.StatusNotFound {
		t.Errorf("second re-send from %s: %d %s; want 404", others[1].id, r.status, r.body)
	}
	if r := others[1].api(t, http.MethodPost, "/dead-letters/messages/no-such-letter/resend", ""); r.status != http.StatusNotFound {
		t.Errorf("re-send of an unknown dead letter from %s: %d %s; want 404", others[1].id, r.status, r.body)
	}
	recs = auditOf(t, others[1], sent.Mutation)
	if len(recs) != 1 || recs[0]["op"] != "resend" || recs[0]["reverts"] != deadLetter || recs[0]["reason"] != "now" {
		t.Errorf("the re-send's audit record, from %s: %v", others[1].id, recs)
	}
	// Each count of id on the egress once: the two messages and the
	// re-sent one (the write and its revert send nothing).
	egress := func() []string { return countsOf(t, brokers, id) }
	waitFor(t, 30*time.Second, "three counts of "+id+" on the egress", func() bool { return len(egress()) >= 3 })
	// A second run of the message would show by now: a count of 4.
	time.Sleep(2 * time.Second)
	everyNodeReads(3)
	if got, want := egress(), []string{id + "=1", id + "=2", id + "=3"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("egress records of %s: %v; want %v", id, got, want)
	}
}
