package e2e

import (
	"encoding/json"
	"net/http"
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
