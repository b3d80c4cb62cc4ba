package stateapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

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

// TestMergeReceipt: the node that has the receipt answers; none having it
// is a 404 only when every partition answered.
func TestMergeReceipt(t *testing.T) {
	if s, _, b := mergeReceipt([]forward.Answer{answer("a", 404, `{}`), answer("b", 200, `{"status":"committed"}`)}, nil); s != 200 || string(b) != `{"status":"committed"}` {
		t.Errorf("found: %d %s", s, b)
	}
	if s, _, _ := mergeReceipt([]forward.Answer{answer("a", 404, `{}`)}, nil); s != 404 {
		t.Errorf("unknown everywhere: %d", s)
	}
	if s, h, _ := mergeReceipt([]forward.Answer{answer("a", 404, `{}`)}, []int{3}); s != 503 || h.Get(MissingHeader) != "3" {
		t.Errorf("unknown, partition 3 missing: %d %v", s, h)
	}
}
