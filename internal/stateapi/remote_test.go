package stateapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

func answer(node string, status int, body string) forward.Answer {
	return forward.Answer{Node: node, Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
}

// TestMergeListingPagesAcrossNodes: the ids of every node, in order, each
// once, one page of limit with the cursor of its last id; the next page,
// asked with that cursor, goes on from there.
func TestMergeListingPagesAcrossNodes(t *testing.T) {
	status, h, body := mergeListing(idsListing(3), []forward.Answer{
		answer("a", 200, `{"namespace":"kc","type":"c","ids":["a1","c2","e3"],"next":"e3"}`),
		answer("b", 200, `{"namespace":"kc","type":"c","ids":["b1","c2"],"next":null}`),
	}, nil)
	var page struct {
		Namespace string   `json:"namespace"`
		IDs       []string `json:"ids"`
		Next      *string  `json:"next"`
		Missing   []int    `json:"missingPartitions"`
	}
	if err := json.Unmarshal(body, &page); err != nil || status != 200 {
		t.Fatal(status, err, string(body))
	}
	if !slices.Equal(page.IDs, []string{"a1", "b1", "c2"}) || page.Next == nil || *page.Next != "c2" || page.Namespace != "kc" {
		t.Errorf("page %s", body)
	}
	if page.Missing != nil || h.Get(MissingHeader) != "" {
		t.Errorf("missing partitions named with none missing: %s %v", body, h)
	}
	// The last page: nothing more anywhere.
	_, _, body = mergeListing(idsListing(3), []forward.Answer{
		answer("a", 200, `{"ids":["e3"],"next":null}`),
		answer("b", 200, `{"ids":[],"next":null}`),
	}, []int{5, 6})
	page.Next, page.Missing = nil, nil
	json.Unmarshal(body, &page)
	if !slices.Equal(page.IDs, []string{"e3"}) || page.Next != nil || !slices.Equal(page.Missing, []int{5, 6}) {
		t.Errorf("last page %s", body)
	}
}

// TestMergeListingSaysWhatIsMissing: partitions no node answered for are
// in the header and the body; with no answer at all, a 503.
func TestMergeListingSaysWhatIsMissing(t *testing.T) {
	_, h, _ := mergeListing(idsListing(10), []forward.Answer{answer("a", 200, `{"ids":["x"],"next":null}`)}, []int{1, 4})
	if h.Get(MissingHeader) != "1,4" {
		t.Errorf("header %v", h)
	}
	status, h, body := mergeListing(idsListing(10), []forward.Answer{answer("a", 500, `{}`)}, []int{0, 1})
	if status != 503 || h.Get("Retry-After") == "" || h.Get(MissingHeader) != "0,1" {
		t.Errorf("no answer: %d %v %s", status, h, body)
	}
}

// TestMergeListingPassesARefusal: a node's 400 (a bad cursor, say) is the
// answer.
func TestMergeListingPassesARefusal(t *testing.T) {
	status, _, body := mergeListing(idsListing(10), []forward.Answer{
		answer("a", 200, `{"ids":[],"next":null}`),
		answer("b", 400, `{"detail":"bad"}`),
	}, nil)
	if status != 400 || string(body) != `{"detail":"bad"}` {
		t.Errorf("%d %s", status, body)
	}
}

// TestMergeAuditNewestFirst: records of every node in the log's order
// (newest first here), the cursor that of the last one.
func TestMergeAuditNewestFirst(t *testing.T) {
	rec := func(at, m string) string {
		return `{"mutation":"` + m + `","at":"` + at + `","state":"count","namespace":"kc","type":"c","id":"x","op":"put","before":null,"version":"1"}`
	}
	_, _, body := mergeListing(auditListing(2, true), []forward.Answer{
		answer("a", 200, `{"records":[`+rec("2026-01-01T00:00:03Z", "m3")+`,`+rec("2026-01-01T00:00:01Z", "m1")+`],"next":null}`),
		answer("b", 200, `{"records":[`+rec("2026-01-01T00:00:02Z", "m2")+`],"next":null}`),
	}, nil)
	var page struct {
		Records []auditJSON `json:"records"`
		Next    *string     `json:"next"`
	}
	json.Unmarshal(body, &page)
	if len(page.Records) != 2 || page.Records[0].Mutation != "m3" || page.Records[1].Mutation != "m2" || page.Next == nil {
		t.Fatalf("page %s", body)
	}
	c, err := parseAuditCursor(*page.Next)
	if err != nil || c.Mutation != "m2" || c.State != "count" || c.At != page.Records[1].At.UnixMilli() {
		t.Errorf("cursor %+v %v", c, err)
	}
}

// TestMergeTypes: a type is registered or holds state when any node says
// so, listed once; namespaces follow the merged types.
func TestMergeTypes(t *testing.T) {
	_, _, body := mergeListing(typesListing(), []forward.Answer{
		answer("a", 200, `{"namespaces":["kc"],"types":[{"namespace":"kc","type":"c","registered":true,"holdsState":false,"registeredStates":1}]}`),
		answer("b", 200, `{"namespaces":["kc","zz"],"types":[{"namespace":"kc","type":"c","registered":true,"holdsState":true,"registeredStates":1},{"namespace":"zz","type":"old","registered":false,"holdsState":true,"registeredStates":0}]}`),
	}, nil)
	var out struct {
		Namespaces []string   `json:"namespaces"`
		Types      []typeInfo `json:"types"`
	}
	json.Unmarshal(body, &out)
	if !slices.Equal(out.Namespaces, []string{"kc", "zz"}) || len(out.Types) != 2 || !out.Types[0].HoldsState || !out.Types[0].Registered {
		t.Errorf("%s", body)
	}
}

// TestMergeIngressDeadLetters: one ingress's dead letters of every node in
// the store's order (stored time, topic, partition, offset), one page with
// the cursor of its last; the summary adds each node's counts by ingress,
// topic and reason, with the oldest and newest times of any.
func TestMergeIngressDeadLetters(t *testing.T) {
	dl := func(at string, p, off int) string {
		return fmt.Sprintf(`{"ingress":"shop/in","topic":"in","partition":%d,"offset":%d,"reason":"null-key","timestamp":"2026-01-01T00:00:00Z","storedAt":"%s","key":null,"value":{"length":0,"base64":""}}`, p, off, at)
	}
	_, _, body := mergeListing(ingressDeadLettersListing(2), []forward.Answer{
		answer("a", 200, `{"deadLetters":[`+dl("2026-01-01T00:00:01Z", 0, 5)+`,`+dl("2026-01-01T00:00:02Z", 2, 1)+`],"next":null}`),
		answer("b", 200, `{"deadLetters":[`+dl("2026-01-01T00:00:01Z", 1, 9)+`],"next":null}`),
	}, nil)
	var page struct {
		DeadLetters []deadLetterJSON `json:"deadLetters"`
		Next        *string          `json:"next"`
	}
	json.Unmarshal(body, &page)
	if len(page.DeadLetters) != 2 || page.DeadLetters[0].Partition != 0 || page.DeadLetters[1].Partition != 1 || page.Next == nil {
		t.Fatalf("page %s", body)
	}
	c, err := parseDeadLetterCursor(*page.Next)
	if err != nil || c.Partition != 1 || c.Offset != 9 || c.Topic != "in" || c.At != page.DeadLetters[1].StoredAt.UnixMilli() {
		t.Errorf("cursor %+v %v", c, err)
	}

	_, _, body = mergeListing(ingressSummaryListing(), []forward.Answer{
		answer("a", 200, `{"ingresses":[{"ingress":"shop/in","deadLetters":3,"oldestStoredAt":"2026-01-01T00:00:02Z","newestStoredAt":"2026-01-01T00:00:05Z",`+
			`"counts":[{"topic":"in","reason":"null-key","count":3,"oldestStoredAt":"2026-01-01T00:00:02Z","newestStoredAt":"2026-01-01T00:00:05Z"}]}]}`),
		answer("b", 200, `{"ingresses":[{"ingress":"shop/in","deadLetters":2,"oldestStoredAt":"2026-01-01T00:00:01Z","newestStoredAt":"2026-01-01T00:00:03Z",`+
			`"counts":[{"topic":"in","reason":"empty-key","count":1,"oldestStoredAt":"2026-01-01T00:00:03Z","newestStoredAt":"2026-01-01T00:00:03Z"},`+
			`{"topic":"in","reason":"null-key","count":1,"oldestStoredAt":"2026-01-01T00:00:01Z","newestStoredAt":"2026-01-01T00:00:01Z"}]},`+
			`{"ingress":"zz/other","deadLetters":1,"oldestStoredAt":"2026-01-01T00:00:01Z","newestStoredAt":"2026-01-01T00:00:01Z",`+
			`"counts":[{"topic":"x","reason":"no-route","count":1,"oldestStoredAt":"2026-01-01T00:00:01Z","newestStoredAt":"2026-01-01T00:00:01Z"}]}]}`),
	}, nil)
	var sum struct {
		Ingresses []ingressDeadLetters `json:"ingresses"`
	}
	json.Unmarshal(body, &sum)
	if len(sum.Ingresses) != 2 || sum.Ingresses[1].Ingress != "zz/other" {
		t.Fatalf("summary %s", body)
	}
	in := sum.Ingresses[0]
	if in.Ingress != "shop/in" || in.DeadLetters != 5 || in.OldestStoredAt.Second() != 1 || in.NewestStoredAt.Second() != 5 ||
		len(in.Counts) != 2 || in.Counts[0].Reason != "empty-key" || in.Counts[0].Count != 1 ||
		in.Counts[1].Count != 4 || in.Counts[1].OldestStoredAt.Second() != 1 || in.Counts[1].NewestStoredAt.Second() != 5 {
		t.Errorf("summary of shop/in %+v", in)
	}
}

// TestMergeReceipt: the node that has the receipt answers; none having it
// is a 404 only when every partition answered.
func TestMergeReceipt(t *testing.T) {
	if s, _, b := mergeOne([]forward.Answer{answer("a", 404, `{}`), answer("b", 200, `{"status":"committed"}`)}, nil); s != 200 || string(b) != `{"status":"committed"}` {
		t.Errorf("found: %d %s", s, b)
	}
	if s, _, _ := mergeOne([]forward.Answer{answer("a", 404, `{}`)}, nil); s != 404 {
		t.Errorf("unknown everywhere: %d", s)
	}
	if s, h, _ := mergeOne([]forward.Answer{answer("a", 404, `{}`)}, []int{3}); s != 503 || h.Get(MissingHeader) != "3" {
		t.Errorf("unknown, partition 3 missing: %d %v", s, h)
	}
}

// fakeCluster is the test double of the other nodes: it owns what owned
// says, and records what was forwarded and gathered.
type fakeCluster struct {
	owned     []int
	forwarded []int
	gathered  []string
	changes   []string // "METHOD path" of the state changes sent once
	spread    []string // "METHOD path partitions" of the changes spread
}

func (c *fakeCluster) ForwardOnce(w http.ResponseWriter, r *http.Request, p int) (bool, error) {
	io.Copy(io.Discard, r.Body)
	c.changes = append(c.changes, r.Method+" "+r.URL.Path)
	return false, nil // no owner answered
}

func (c *fakeCluster) Owned() []int { return c.owned }

func (c *fakeCluster) Spread(r *http.Request, _ []byte, parts []int, _ time.Duration) ([]forward.Answer, *forward.Answer, []int) {
	c.spread = append(c.spread, r.Method+" "+r.URL.Path+" "+forward.FormatPartitions(parts))
	return nil, nil, parts // no owner answered
}

func (c *fakeCluster) Forward(w http.ResponseWriter, r *http.Request, p int) bool {
	c.forwarded = append(c.forwarded, p)
	return false // no owner answered
}

func (c *fakeCluster) Gather(r *http.Request, _ time.Duration, _ func(forward.Answer) bool) ([]forward.Answer, []int) {
	c.gathered = append(c.gathered, r.URL.Path)
	return nil, []int{0, 1, 2, 3}
}

// TestClusterHooks: a read about a partition this node does not own goes
// to Forward, unless it carries the hop header (then 503, not forwarded
// again); a write is not forwarded; a listing is gathered, and answered
// for the owned partitions alone when it carries the hop header.
func TestClusterHooks(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	c := &fakeCluster{}
	base := serve(t, eng, Options{Cluster: c})
	mustPut(t, base, "/state/test/fn/x/i64", "text/plain", "5")
	p := partitionOf(eng, address.Address{Type: fnType, ID: "x"})

	r := send(t, base, "GET", "/state/test/fn/x/i64", nil)
	if r.StatusCode != 503 || !slices.Equal(c.forwarded, []int{p}) || r.Header.Get("Retry-After") == "" {
		t.Errorf("read of a partition not owned: %s, forwarded %v; want 503 after forwarding partition %d", r.Status, c.forwarded, p)
	}
	c.forwarded = nil
	r = send(t, base, "GET", "/state/test/fn/x/i64/history", nil, forward.Header, "node-z")
	if pr := r.problem(t); r.StatusCode != 503 || c.forwarded != nil || pr.Partition == nil || *pr.Partition != p {
		t.Errorf("read with the hop header: %s %s, forwarded %v; want 503 naming partition %d, not forwarded", r.Status, r.body, c.forwarded, p)
	}
	send(t, base, "PUT", "/state/test/fn/x/i64", []byte("6"), "Content-Type", "text/plain")
	if c.forwarded != nil {
		t.Errorf("a PUT was forwarded: %v", c.forwarded)
	}

	// State changes that do not travel as commands go to the owner once;
	// not with the hop header, and not a type-level pause (every
	// partition's).
	changes := []string{"POST /pause/test/fn/x", "POST /resume/test/fn/x", "POST /inbox/test/fn/x/skip",
		"DELETE /addresses/test/fn/x", "POST /state/test/fn/x/i64"}
	for _, ch := range changes {
		method, path, _ := strings.Cut(ch, " ")
		if r := send(t, base, method, path, []byte(`{"reason":"test"}`), "Content-Type", "application/json"); r.StatusCode != 503 {
			t.Errorf("%s about a partition not owned, no owner answering: %s %s; want 503", ch, r.Status, r.body)
		}
	}
	if !slices.Equal(c.changes, changes) {
		t.Errorf("changes sent to the owner: %v; want %v", c.changes, changes)
	}
	c.changes = nil
	if r := send(t, base, "POST", "/pause/test/fn/x", nil, forward.Header, "node-z"); r.StatusCode != 503 || c.changes != nil {
		t.Errorf("a pause with the hop header: %s, sent on %v; want 503, not sent on", r.Status, c.changes)
	}
	// A type-level pause is spread: every partition but the type's owner,
	// then (had they all applied it) the owner; none answering, a 503
	// naming them and the mutation id to complete it with.
	r = send(t, base, "POST", "/pause/test/fn", []byte(`{"reason":"t"}`), "Content-Type", "application/json")
	owner := partitionOf(eng, address.Address{Type: fnType})
	var others []string
	for p := range 4 {
		if p != owner {
			others = append(others, strconv.Itoa(p))
		}
	}
	wantSpread := []string{"POST /pause/test/fn " + strings.Join(others, ",")}
	pr := r.problem(t)
	if c.changes != nil || !slices.Equal(c.spread, wantSpread) || r.StatusCode != 503 || r.Header.Get(MissingHeader) != strings.Join(others, ",") ||
		pr.Mutation == "" || r.Header.Get("Location") != "/mutations/"+pr.Mutation || r.Header.Get("Retry-After") == "" {
		t.Errorf("a type-level pause, no owner answering: %s %v %s, spread %v, sent once %v; want 503 naming %v and its mutation, spread %v",
			r.Status, r.Header, r.body, c.spread, c.changes, others, wantSpread)
	}
	// Sent again with its id: the receipt is looked for first (no node
	// answers here: a 503 again, not a second spread).
	c.spread, c.gathered = nil, nil
	r = send(t, base, "POST", "/pause/test/fn", nil, MutationIDHeader, pr.Mutation)
	if r.StatusCode != 503 || c.spread != nil || !slices.Equal(c.gathered, []string{"/mutations/" + pr.Mutation}) {
		t.Errorf("the retry with its mutation id: %s %s, spread %v, gathered %v", r.Status, r.body, c.spread, c.gathered)
	}
	for _, bad := range []struct{ path, id string }{{"/pause/test/fn", "m1"}, {"/resume/test/fn/x", pr.Mutation}} {
		if r := send(t, base, "POST", bad.path, nil, MutationIDHeader, bad.id); r.StatusCode != 400 {
			t.Errorf("POST %s with %s %q: %s %s; want 400", bad.path, MutationIDHeader, bad.id, r.Status, r.body)
		}
	}
	c.gathered = nil

	r = send(t, base, "GET", "/state/test/fn", nil)
	if r.StatusCode != 503 || r.Header.Get(MissingHeader) != "0,1,2,3" || !slices.Equal(c.gathered, []string{"/state/test/fn"}) {
		t.Errorf("listing with no node answering: %s %v, gathered %v", r.Status, r.Header, c.gathered)
	}
	for _, target := range []string{"/state", "/state/test", "/audit", "/failing", "/pauses", "/mutations/m1", "/dead-letters/messages", "/dead-letters/messages/m1", "/overview", "/ingresses", "/ingresses/shop/in/dead-letters"} {
		if r := send(t, base, "GET", target, nil); r.StatusCode != 503 || r.Header.Get(MissingHeader) != "0,1,2,3" {
			t.Errorf("GET %s with no node answering: %s %v", target, r.Status, r.Header)
		}
	}
	var page struct {
		IDs []string `json:"ids"`
	}
	r = send(t, base, "GET", "/state/test/fn", nil, forward.Header, "node-z")
	r.json(t, &page)
	if len(page.IDs) != 0 || r.Header.Get(forward.Partitions) != "" || len(c.gathered) != 12 {
		t.Errorf("listing with the hop header, no partition owned: %v %v", page.IDs, r.Header)
	}
	c.owned = []int{0, 1, 2, 3}
	r = send(t, base, "GET", "/state/test/fn", nil, forward.Header, "node-z")
	r.json(t, &page)
	if !slices.Contains(page.IDs, "x") || r.Header.Get(forward.Partitions) != "0,1,2,3" {
		t.Errorf("listing with the hop header, every partition owned: %v %v", page.IDs, r.Header)
	}
}
