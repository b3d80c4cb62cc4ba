package stateapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// toHolder is the test double of the cluster as node A sees it: A owns
// owned, and one other node, the holder (an API at holder whose cluster
// says it owns every partition), owns the rest. Gather and ForwardOnce
// send the request there over HTTP with the hop header, as
// internal/cluster/forward does, and record what they sent.
type toHolder struct {
	owned  []int
	holder string
	// down: the holder does not answer (its partitions are missing).
	down     bool
	gathered []string // "METHOD path" of the lookups
	sent     []string // "METHOD path p=<partition> <PartitionHeader> <body>" of the changes sent once
}

func (c *toHolder) Owned() []int { return c.owned }

func (c *toHolder) Forward(http.ResponseWriter, *http.Request, int) bool { return false }

// Spread is not what these tests use: every partition is missing.
func (c *toHolder) Spread(_ *http.Request, _ []byte, parts []int, _ time.Duration) ([]forward.Answer, *forward.Answer, []int) {
	return nil, nil, parts
}

func (c *toHolder) exchange(r *http.Request, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, c.holder+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Header.Set(forward.Header, "node-a")
	return client.Do(req)
}

func (c *toHolder) Gather(r *http.Request, _ time.Duration, _ func(forward.Answer) bool) ([]forward.Answer, []int) {
	c.gathered = append(c.gathered, r.Method+" "+r.URL.EscapedPath())
	all := []int{0, 1, 2, 3}
	if c.down {
		return nil, all
	}
	resp, err := c.exchange(r, nil)
	if err != nil {
		return nil, all
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := forward.Answer{Node: "node-b", Status: resp.StatusCode, Header: resp.Header, Body: b}
	if resp.StatusCode >= 500 {
		return []forward.Answer{a}, all
	}
	a.Partitions = forward.ParsePartitions(resp.Header.Get(forward.Partitions))
	return []forward.Answer{a}, nil
}

func (c *toHolder) ForwardOnce(w http.ResponseWriter, r *http.Request, p int) (bool, error) {
	body, _ := io.ReadAll(r.Body)
	c.sent = append(c.sent, fmt.Sprintf("%s %s p=%d %s %s", r.Method, r.URL.EscapedPath(), p, r.Header.Get(PartitionHeader), body))
	if c.down {
		return false, nil
	}
	resp, err := c.exchange(r, body)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return true, nil
}

// allOwned is the cluster of the node that owns every partition.
func allOwned() *fakeCluster { return &fakeCluster{owned: []int{0, 1, 2, 3}} }

// TestRevertFromANodeThatDoesNotHoldIt: a revert sent to a node that does
// not own the mutation's partition is looked up on the other nodes and
// sent once to the owner of the partition its receipt names, with that
// partition in PartitionHeader; the answers are embedded mode's: the
// revert's receipt, 412 when the entry moved on, 409 for a rejected
// mutation, 404 for an unknown id (nothing sent), 503 while the holder
// does not answer. A node that owns the partition reverts itself; a node
// another node sent the revert to answers 503 for a partition it does not
// own, so that the sender tries the next owner.
func TestRevertFromANodeThatDoesNotHoldIt(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	b := serve(t, eng, Options{Cluster: allOwned()})
	c := &toHolder{holder: b}
	a := serve(t, eng, Options{Cluster: c})
	p := partitionOf(eng, address.Address{Type: fnType, ID: "x"})

	mustPut(t, b, "/state/test/fn/x/i32", "text/plain", "1")
	m := mustPut(t, b, "/state/test/fn/x/i32", "text/plain", "2").Mutation
	r := send(t, a, "POST", "/mutations/"+m+"/revert", nil, "Statefun-Reason", "undo from a")
	var rc receiptJSON
	r.json(t, &rc)
	if r.StatusCode != 200 || rc.Status != "committed" {
		t.Fatalf("revert from a node that does not hold it: %s %s", r.Status, r.body)
	}
	wantSent := fmt.Sprintf("POST /mutations/%s/revert p=%d %d ", m, p, p)
	if !slices.Equal(c.gathered, []string{"GET /mutations/" + m}) || !slices.Equal(c.sent, []string{wantSent}) {
		t.Fatalf("looked up %q, sent %q; want the receipt looked up and %q sent once", c.gathered, c.sent, wantSent)
	}
	if got := string(send(t, b, "GET", "/state/test/fn/x/i32", nil, "Accept", "text/plain").body); got != "1" {
		t.Errorf("after the revert the entry holds %q; want 1", got)
	}
	var audit struct{ Records []auditJSON }
	send(t, b, "GET", "/audit?mutation="+rc.Mutation, nil, forward.Header, "test").json(t, &audit)
	if len(audit.Records) != 1 || audit.Records[0].Reverts != m || audit.Records[0].Reason != "undo from a" {
		t.Errorf("the revert's audit record: %+v", audit.Records)
	}

	// Again: the entry moved on, 412 as on the holder, sent once.
	c.gathered, c.sent = nil, nil
	if r := send(t, a, "POST", "/mutations/"+m+"/revert", nil); r.StatusCode != 412 || r.problem(t).Receipt == nil || len(c.sent) != 1 {
		t.Errorf("second revert: %s %s, sent %q; want 412 with the rejected receipt", r.Status, r.body, c.sent)
	}
	// A rejected mutation: 409 from its receipt, nothing sent.
	rr := send(t, b, "PUT", "/state/test/fn/x/i32", []byte("9"), "Content-Type", "text/plain", "If-Match", `"12345"`)
	rejected := rr.problem(t).Receipt.Mutation
	c.sent = nil
	if r := send(t, a, "POST", "/mutations/"+rejected+"/revert", nil); r.StatusCode != 409 || !strings.Contains(r.problem(t).Detail, "is rejected") || c.sent != nil {
		t.Errorf("revert of a rejected mutation: %s %s, sent %q; want 409, nothing sent", r.Status, r.body, c.sent)
	}
	// Unknown everywhere: embedded mode's 404, nothing sent.
	if r := send(t, a, "POST", "/mutations/nope/revert", nil); r.StatusCode != 404 || r.problem(t).Detail != "no receipt for mutation nope" || c.sent != nil {
		t.Errorf("revert of an unknown id: %s %s, sent %q", r.Status, r.body, c.sent)
	}
	// The holder does not answer: 503 naming what is missing, nothing sent.
	c.down = true
	if r := send(t, a, "POST", "/mutations/"+m+"/revert", nil); r.StatusCode != 503 || r.Header.Get("Retry-After") == "" ||
		r.Header.Get(MissingHeader) != "0,1,2,3" || c.sent != nil {
		t.Errorf("revert with the holder down: %s %v %s, sent %q", r.Status, r.Header, r.body, c.sent)
	}
	c.down = false

	// Sent here by another node: answered here alone, and only for a
	// partition this node owns.
	c.gathered = nil
	r = send(t, a, "POST", "/mutations/nope/revert", nil, forward.Header, "node-z", PartitionHeader, strconv.Itoa(p))
	if pr := r.problem(t); r.StatusCode != 503 || pr.Partition == nil || *pr.Partition != p || c.gathered != nil {
		t.Errorf("a hop-marked revert naming partition %d, not owned: %s %s, looked up %q; want 503 naming it", p, r.Status, r.body, c.gathered)
	}
	r = send(t, a, "POST", "/mutations/"+m+"/revert", nil, forward.Header, "node-z")
	if pr := r.problem(t); r.StatusCode != 503 || pr.Partition == nil || *pr.Partition != p || c.gathered != nil {
		t.Errorf("a hop-marked revert held in a partition not owned: %s %s; want 503 naming partition %d", r.Status, r.body, p)
	}
	if r := send(t, b, "POST", "/mutations/nope/revert", nil, forward.Header, "node-a", PartitionHeader, strconv.Itoa(p)); r.StatusCode != 404 {
		t.Errorf("a hop-marked revert of an unknown id on the owner: %s %s; want 404", r.Status, r.body)
	}

	// A node owning the partition reverts itself.
	c.owned = []int{0, 1, 2, 3}
	m = mustPut(t, a, "/state/test/fn/x/i32", "text/plain", "3").Mutation
	if r := send(t, a, "POST", "/mutations/"+m+"/revert", nil); r.StatusCode != 200 || c.gathered != nil || c.sent != nil {
		t.Errorf("revert on the owner: %s %s, looked up %q, sent %q; want it done here", r.Status, r.body, c.gathered, c.sent)
	}
}

// TestRevertLookupNeedsRead: finding the holder reads the receipt, so a
// token without the read scope is told so (403), and nothing is sent.
func TestRevertLookupNeedsRead(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	tokens := []Token{tokenRead, tokenWrite, tokenBoth}
	b := serve(t, eng, Options{Cluster: allOwned(), Tokens: tokens})
	c := &toHolder{holder: b}
	a := serve(t, eng, Options{Cluster: c, Tokens: tokens})
	m := mustPut(t, b, "/state/test/fn/y/i32", "text/plain", "1", "Authorization", "Bearer "+tokenBoth.Secret).Mutation
	r := send(t, a, "POST", "/mutations/"+m+"/revert", nil, "Authorization", "Bearer "+tokenWrite.Secret)
	if r.StatusCode != 403 || !strings.Contains(r.problem(t).Detail, "read scope") || c.sent != nil {
		t.Errorf("revert with a write-only token from a node that does not hold it: %s %s, sent %q; want 403 naming the read scope", r.Status, r.body, c.sent)
	}
	if r := send(t, a, "POST", "/mutations/"+m+"/revert", nil, "Authorization", "Bearer "+tokenBoth.Secret); r.StatusCode != 200 || len(c.sent) != 1 {
		t.Errorf("revert with a read and write token: %s %s, sent %q", r.Status, r.body, c.sent)
	}
}

// TestResendFromANodeThatDoesNotHoldIt: a re-send of a message dead
// letter sent to a node that does not own the skipped address is looked
// up on the other nodes and sent once, with its body, to the owner of the
// address's partition; the message runs once. The body is checked first
// (400 without a lookup); a dead letter re-sent already is embedded
// mode's 404.
func TestResendFromANodeThatDoesNotHoldIt(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	b := serve(t, eng, Options{Cluster: allOwned()})
	c := &toHolder{holder: b}
	a := serve(t, eng, Options{Cluster: c})
	p := partitionOf(eng, address.Address{Type: fnType, ID: "z"})

	if r := send(t, b, "POST", "/pause/test/fn/z", nil); r.StatusCode != 200 {
		t.Fatalf("pause: %s %s", r.Status, r.body)
	}
	deadLetter := skipQueued(t, b, eng, "z")
	if r := send(t, b, "POST", "/resume/test/fn/z", nil); r.StatusCode != 200 {
		t.Fatalf("resume %s %s", r.Status, r.body)
	}
	path := "/dead-letters/messages/" + url.PathEscape(deadLetter) + "/resend"

	if r := send(t, a, "POST", path, []byte(`{"key":"1/ingress/1"}`)); r.StatusCode != 400 || c.gathered != nil || c.sent != nil {
		t.Errorf("a re-send with a field it does not take: %s %s, looked up %q; want 400 before any lookup", r.Status, r.body, c.gathered)
	}
	body := `{"reason":"fixed"}`
	r := send(t, a, "POST", path, []byte(body), "Content-Type", "application/json")
	var out struct {
		Mutation string      `json:"mutation"`
		Address  addressJSON `json:"address"`
		InboxKey string      `json:"inboxKey"`
	}
	r.json(t, &out)
	if r.StatusCode != 200 || out.Address.ID != "z" || out.InboxKey == "" {
		t.Fatalf("re-send from a node that does not hold it: %s %s", r.Status, r.body)
	}
	wantSent := fmt.Sprintf("POST %s p=%d %d %s", path, p, p, body)
	if !slices.Equal(c.gathered, []string{"GET /dead-letters/messages/" + deadLetter}) || !slices.Equal(c.sent, []string{wantSent}) {
		t.Fatalf("looked up %q, sent %q; want the dead letter looked up and %q sent once", c.gathered, c.sent, wantSent)
	}
	waitFor(t, "the re-sent message to run", func() bool {
		return string(send(t, b, "GET", "/state/test/fn/z/i64", nil, "Accept", "text/plain").body) == "1"
	})
	var audit struct{ Records []auditJSON }
	send(t, b, "GET", "/audit?mutation="+out.Mutation, nil, forward.Header, "test").json(t, &audit)
	if len(audit.Records) != 1 || audit.Records[0].Op != "resend" || audit.Records[0].Reverts != deadLetter || audit.Records[0].Reason != "fixed" {
		t.Errorf("the re-send's audit record: %+v", audit.Records)
	}

	c.sent = nil
	if r := send(t, a, "POST", path, nil); r.StatusCode != 404 || r.problem(t).Detail != noDeadLetter(deadLetter) || c.sent != nil {
		t.Errorf("a second re-send: %s %s, sent %q; want embedded mode's 404, nothing sent", r.Status, r.body, c.sent)
	}
	if got := string(send(t, b, "GET", "/state/test/fn/z/i64", nil, "Accept", "text/plain").body); got != "1" {
		t.Errorf("z ran the message to %s times", got)
	}
	// Sent here by another node for a partition this node does not own.
	if r := send(t, a, "POST", path, nil, forward.Header, "node-z", PartitionHeader, strconv.Itoa(p)); r.StatusCode != 503 {
		t.Errorf("a hop-marked re-send naming a partition not owned: %s %s; want 503", r.Status, r.body)
	}
}

// TestLostAnswerOfARevertAndAReSend: through the real forwarder, a revert
// or a re-send whose answer is lost after the holder applied it (the
// holder's connection cut) is sent again with the same mutation id, and
// the holder answers the repeat as it answered the first: applied once.
// An answer lost every time is a 502 naming the id.
func TestLostAnswerOfARevertAndAReSend(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	b := serve(t, eng, Options{Cluster: allOwned()})
	holderAPI := New(eng, eng.Reads(), Options{Cluster: allOwned()}).Handler(http.NotFoundHandler())
	var (
		posts  atomic.Int32
		cutAll atomic.Bool
	)
	holder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (posts.Add(1) == 1 || cutAll.Load()) {
			holderAPI.ServeHTTP(httptest.NewRecorder(), r) // applied
			panic(http.ErrAbortHandler)                    // the connection is cut before the answer
		}
		holderAPI.ServeHTTP(w, r)
	}))
	t.Cleanup(holder.Close)
	fw, err := forward.New(forward.Config{NodeID: "node-a", Partitions: 4, Budget: 2 * time.Second,
		Assignment: func(context.Context) (map[int]string, map[string]string, error) {
			return map[int]string{0: "node-b", 1: "node-b", 2: "node-b", 3: "node-b"}, map[string]string{"node-b": holder.URL}, nil
		},
		Owned: func() []int { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	a := serve(t, eng, Options{Cluster: fw})
	audited := func(id string) int {
		var page struct {
			Records []auditJSON `json:"records"`
		}
		send(t, b, "GET", "/audit?mutation="+id, nil, forward.Header, "test").json(t, &page)
		return len(page.Records)
	}

	m := mustPut(t, b, "/state/test/fn/l/i32", "text/plain", "1").Mutation
	r := send(t, a, "POST", "/mutations/"+m+"/revert", nil)
	var rc receiptJSON
	r.json(t, &rc)
	if r.StatusCode != 200 || posts.Load() != 2 || audited(rc.Mutation) != 1 {
		t.Errorf("revert whose first answer was lost: %s %s, sent %d times, %d audit records; want 200 after two sends, applied once",
			r.Status, r.body, posts.Load(), audited(rc.Mutation))
	}

	if r := send(t, b, "POST", "/pause/test/fn/l", nil); r.StatusCode != 200 {
		t.Fatalf("pause: %s %s", r.Status, r.body)
	}
	ingest(t, eng, "l")
	waitFor(t, "the message queued behind the pause", func() bool {
		var in inboxJSON
		send(t, b, "GET", "/inbox/test/fn/l", nil).json(t, &in)
		return in.Queued.Count == 1
	})
	var skip repairReceiptJSON
	send(t, b, "POST", "/inbox/test/fn/l/skip", nil).json(t, &skip)
	if skip.DeadLetter == "" {
		t.Fatalf("skip: %+v", skip)
	}
	cutAll.Store(true)
	r = send(t, a, "POST", "/dead-letters/messages/"+skip.DeadLetter+"/resend", []byte(`{"reason":"r"}`))
	id := strings.TrimPrefix(r.Header.Get("Location"), "/mutations/")
	if r.StatusCode != 502 || id == "" || !strings.Contains(r.problem(t).Detail, "read its receipt at /mutations/"+id) {
		t.Fatalf("re-send whose answer was lost every time: %s %s %v; want 502 naming its mutation id", r.Status, r.body, r.Header)
	}
	if n := audited(id); posts.Load() < 3 || n != 1 {
		t.Errorf("re-send whose answer was lost every time: sent %d times, %d audit records; want it sent again, applied once", posts.Load()-1, n)
	}
	if r := send(t, a, "POST", "/mutations/"+m+"/revert", nil); r.StatusCode != 502 || r.Header.Get("Location") == "" {
		t.Errorf("a revert whose answer was lost every time: %s %s; want 502 naming its mutation id", r.Status, r.body)
	}
}
