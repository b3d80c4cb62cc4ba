package stateapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// nodePage is one node's export page of kc/counter with entries of ids
// (state "s"), ending at the cursor of last when last is not "".
func nodePage(last string, ids ...string) exportPageJSON {
	p := exportPageJSON{Namespace: "kc", Type: "counter", Entries: []json.RawMessage{}}
	for _, id := range ids {
		p.Entries = append(p.Entries, json.RawMessage(fmt.Sprintf(`{"address":{"namespace":"kc","type":"counter","id":%q},"state":"s","typename":"t/x","version":"1","value":1}`, id)))
	}
	if last != "" {
		c := formatExportCursor(exportCursor{ID: last, State: "s"})
		p.Next = &c
	}
	return p
}

// mergedIDs merges pages as a gathered export page of limit entries and
// returns its ids and the id of its cursor ("" for none).
func mergedIDs(t *testing.T, limit int, pages ...exportPageJSON) ([]string, string) {
	t.Helper()
	status, body := mergeExport(address.TypeName{Namespace: "kc", Name: "counter"}, pages, limit)
	if status != http.StatusOK {
		t.Fatalf("mergeExport: %d %s", status, body)
	}
	var out struct {
		Entries []struct {
			Address struct{ ID string } `json:"address"`
		} `json:"entries"`
		Next *string `json:"next"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range out.Entries {
		ids = append(ids, e.Address.ID)
	}
	next := ""
	if out.Next != nil {
		c, err := parseExportCursor(*out.Next)
		if err != nil {
			t.Fatal(err)
		}
		next = c.ID
	}
	return ids, next
}

// A gathered export page is exact: it never goes past the point where a
// node's page ended early (4 MiB of values, or the entries it may read),
// since that node may hold entries beyond it it did not send; it holds an
// entry two nodes sent once, and ends at limit with the cursor of its last
// entry. Paged to the end, every entry of every node comes exactly once.
func TestMergeExportPages(t *testing.T) {
	// Node 1 stopped after e (its values filled its page); node 2 sent all
	// it has.
	ids, next := mergedIDs(t, 10, nodePage("e", "a", "c", "e"), nodePage("", "b", "d", "f", "g"))
	if !slices.Equal(ids, []string{"a", "b", "c", "d", "e"}) || next != "e" {
		t.Errorf("a node's page ended early: %v next %q; want a..e next e (f and g come after node 1's g, if it has one)", ids, next)
	}
	// Node 1 read entries it does not own and listed none of them.
	ids, next = mergedIDs(t, 10, nodePage("m"), nodePage("", "b", "z"))
	if !slices.Equal(ids, []string{"b"}) || next != "m" {
		t.Errorf("a node's page of skipped entries: %v next %q; want b next m", ids, next)
	}
	// The limit, and an entry two nodes sent (a partition both covered).
	ids, next = mergedIDs(t, 3, nodePage("", "a", "c", "d"), nodePage("", "b", "c", "e"))
	if !slices.Equal(ids, []string{"a", "b", "c"}) || next != "c" {
		t.Errorf("limit 3: %v next %q; want a b c next c", ids, next)
	}
	ids, next = mergedIDs(t, 10, nodePage("", "a", "c"), nodePage("", "b", "c"))
	if !slices.Equal(ids, []string{"a", "b", "c"}) || next != "" {
		t.Errorf("the last page: %v next %q; want a b c and no cursor", ids, next)
	}

	// Two nodes' entries paged to the end, each node's page ending after
	// two entries or at its limit: every entry once, in order.
	all := map[int][]string{0: {"a", "d", "e", "f", "k", "l", "m"}, 1: {"b", "c", "g", "h", "i", "j", "n"}}
	page := func(node int, after string, limit int) exportPageJSON {
		var ids []string
		for _, id := range all[node] {
			if id > after {
				ids = append(ids, id)
			}
		}
		n := min(limit, 2)
		if len(ids) <= n {
			return nodePage("", ids...)
		}
		return nodePage(ids[n-1], ids[:n]...)
	}
	var got []string
	after := ""
	for range 20 {
		ids, next := mergedIDs(t, 3, page(0, after, 3), page(1, after, 3))
		got = append(got, ids...)
		if next == "" {
			break
		}
		after = next
	}
	want := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"}
	if !slices.Equal(got, want) {
		t.Errorf("paged to the end: %v, want %v", got, want)
	}
}

// An owner asked by the node gathering an export page answers from the
// partitions it owns alone, naming them; given its share of an import
// batch, it applies the lines of the partitions of the share it owns, and
// no other, naming those it answered for.
func TestClusterOwnerShare(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	local := serve(t, eng, Options{})
	typ := address.TypeName{Namespace: "x", Name: "y"}
	line := func(id string, v int) string {
		return fmt.Sprintf(`{"address":{"namespace":"x","type":"y","id":%q},"state":"s","typename":"io.statefun.types/int","value":%d}`, id, v)
	}
	var lines []string
	byPart := map[int][]string{}
	for i := range 20 {
		id := fmt.Sprintf("g%02d", i)
		lines = append(lines, line(id, i))
		p := partitionOf(eng, address.Address{Type: typ, ID: id})
		byPart[p] = append(byPart[p], id)
	}
	if r := send(t, local, "POST", "/import/import-setup?mode=overwrite", importBody(1, lines...)); r.StatusCode != 200 {
		t.Fatalf("setup: %s %s", r.Status, r.body)
	}
	own, other := -1, -1
	for p := range byPart {
		switch {
		case own < 0:
			own = p
		case other < 0:
			other = p
		}
	}
	if other < 0 {
		t.Fatal("the ids are all in one partition")
	}
	owner := serve(t, eng, Options{Cluster: &fakeCluster{owned: []int{own}}})

	r := send(t, owner, "GET", "/export/x/y?limit=100", nil, forward.Header, "node-z")
	var page exportPageJSON
	r.json(t, &page)
	var ids []string
	for _, e := range page.Entries {
		var l struct{ Address struct{ ID string } }
		json.Unmarshal(e, &l)
		ids = append(ids, l.Address.ID)
	}
	if r.StatusCode != 200 || r.Header.Get(forward.Partitions) != fmt.Sprint(own) || !slices.Equal(ids, byPart[own]) || page.Next != nil {
		t.Errorf("the owner's part of an export page: %s %s ids %v; want partition %d's %v", r.Status, r.Header.Get(forward.Partitions), ids, own, byPart[own])
	}

	// Its share of a batch: partitions own and other, of which it owns one.
	var batch []string
	for _, id := range append(append([]string{}, byPart[own]...), byPart[other]...) {
		batch = append(batch, line(id, 1000))
	}
	r = send(t, owner, "POST", "/import/import-share?mode=overwrite", importBody(1, batch...),
		forward.Header, "node-z", forward.Partitions, fmt.Sprintf("%d,%d", own, other))
	var ans struct{ Results []importResult }
	r.json(t, &ans)
	if r.StatusCode != 200 || r.Header.Get(forward.Partitions) != fmt.Sprint(own) || len(ans.Results) != len(byPart[own]) {
		t.Fatalf("the owner's share of a batch: %s %s %s; want the %d lines of partition %d", r.Status, r.Header.Get(forward.Partitions), r.body, len(byPart[own]), own)
	}
	for _, id := range append(append([]string{}, byPart[own]...), byPart[other]...) {
		got := send(t, local, "GET", "/state/x/y/"+id+"/s", nil, "Accept", "text/plain").body
		want := "1000"
		if !slices.Contains(byPart[own], id) {
			want = fmt.Sprint(id[1:]) // unchanged: g07 holds 7
			want = strings.TrimLeft(want, "0")
			if want == "" {
				want = "0"
			}
		}
		if string(got) != want {
			t.Errorf("%s holds %s after the share; want %s", id, got, want)
		}
	}
}

// garbled is a cluster whose nodes answer with bodies no node can read
// (another build, say).
type garbled struct{ fakeCluster }

func (g *garbled) Gather(r *http.Request, _ time.Duration, _ func(forward.Answer) bool) ([]forward.Answer, []int) {
	return []forward.Answer{{Node: "node-z", Status: 200, Body: []byte("nope"), Partitions: []int{0, 1, 2, 3}}}, nil
}

func (g *garbled) Spread(r *http.Request, _ []byte, parts []int, _ time.Duration) ([]forward.Answer, *forward.Answer, []int) {
	return []forward.Answer{{Node: "node-z", Status: 200, Body: []byte(`{"results":[]}`), Partitions: parts}}, nil, nil
}

// An answer this node cannot read, or one without a line of the batch, is
// a 502: the client asks again, and nothing is made up.
func TestClusterUnreadableAnswers(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{Cluster: &garbled{}})
	if r := send(t, api, "GET", "/export/x/y", nil); r.StatusCode != 502 {
		t.Errorf("an unreadable export page: %s %s; want 502", r.Status, r.body)
	}
	line := `{"address":{"namespace":"x","type":"y","id":"g"},"state":"s","typename":"x/T","value":1}`
	if r := send(t, api, "POST", "/import/import-x?mode=overwrite", importBody(1, line)); r.StatusCode != 502 || !strings.Contains(string(r.body), "line 1") {
		t.Errorf("an owner's answer without the line: %s %s; want 502 naming line 1", r.Status, r.body)
	}
}

// shareNodes is a cluster of owner servers, each answering for its own
// partitions of one engine's store; Gather sends the request to each, as
// forward's does, and notes the limits it was asked with.
type shareNodes struct {
	fakeCluster
	owners []string // base URLs
	limits []string
}

func (c *shareNodes) Gather(r *http.Request, _ time.Duration, _ func(forward.Answer) bool) ([]forward.Answer, []int) {
	c.limits = append(c.limits, r.URL.Query().Get("limit"))
	var out []forward.Answer
	for i, base := range c.owners {
		req, _ := http.NewRequest(r.Method, base+r.URL.RequestURI(), nil)
		req.Header.Set(forward.Header, "gatherer")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		parts := forward.ParsePartitions(resp.Header.Get(forward.Partitions))
		out = append(out, forward.Answer{Node: fmt.Sprintf("n%d", i), Status: resp.StatusCode, Body: body, Partitions: parts})
	}
	return out, nil
}

// A gathered export page asks each node for its share of the page, not
// the whole page — each node owning a quarter of the partitions here —
// and paging through it still lists every entry once, in order.
func TestExportAsksEachNodeForItsShare(t *testing.T) {
	const partitions = 8
	eng := startEngine(t, engineConfig{partitions: partitions})
	local := serve(t, eng, Options{})
	var lines []string
	for i := range 300 {
		lines = append(lines, fmt.Sprintf(`{"address":{"namespace":"x","type":"y","id":"s%03d"},"state":"s","typename":"io.statefun.types/int","value":%d}`, i, i))
	}
	if r := send(t, local, "POST", "/import/import-setup?mode=overwrite", importBody(1, lines...)); r.StatusCode != 200 {
		t.Fatalf("setup: %s %s", r.Status, r.body)
	}
	nodes := &shareNodes{fakeCluster: fakeCluster{owned: []int{0, 1}}}
	for _, own := range [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}} {
		nodes.owners = append(nodes.owners, serve(t, eng, Options{Cluster: &fakeCluster{owned: own}}))
	}
	gatherer := serve(t, eng, Options{Cluster: nodes})

	got := exportAll(t, gatherer, "x/y", 100, "")
	var ids []string
	for _, l := range got {
		var e ExportLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.Address.ID)
	}
	var want []string
	for i := range 300 {
		want = append(want, fmt.Sprintf("s%03d", i))
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("the gathered export lists %d ids %v...; want the 300 in order", len(ids), ids[:min(len(ids), 5)])
	}
	t.Logf("%d pages, the nodes asked for %v", len(nodes.limits), nodes.limits)
	// A quarter of 100, half again, and 16: 54.
	for _, l := range nodes.limits {
		if l != "54" {
			t.Fatalf("the nodes were asked for limits %v; want 54 each time (their share of a page of 100)", nodes.limits)
		}
	}
	if len(nodes.limits) > 6 {
		t.Errorf("%d pages for 300 entries at 100 a page; the shares cut the pages too short", len(nodes.limits))
	}
}
