package stateapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
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
