package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// In cluster mode a playground ingress request with an Idempotency-Key is
// delivered once however often and to whichever nodes the client retries
// it: the owner of the address drops repeats. The key reused for another
// body is not delivered but kept as a message dead letter on the owner.
func TestClusterIdempotencyKey(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "idem", fn, "node-a", "node-b")
	launchAll(t, nodes...)
	put := func(n *clusterNode, id, key, body string) {
		t.Helper()
		if status, _ := n.sendKeyed("/kc/counter/"+id, "kc/text", `"`+key+`"`, body); status != http.StatusOK {
			t.Fatalf("PUT %s with key %s to %s: %d", id, key, n.id, status)
		}
	}
	// Each request sent three times, to both nodes.
	for _, id := range []string{"x", "y", "z"} {
		for _, n := range []*clusterNode{nodes[0], nodes[1], nodes[0]} {
			put(n, id, "key-"+id, "x")
		}
	}
	put(nodes[1], "y", "key-y2", "x") // a new key: a new message
	put(nodes[1], "z", "key-z", "other body")
	waitCounts(t, nodes, map[string]int{"x": 1, "y": 2, "z": 1}, 30*time.Second)

	// The reused key's message waits among the message dead letters of
	// z's owner, listed from every node (the listing is gathered).
	for _, n := range nodes {
		var reasons []string
		waitFor(t, 30*time.Second, "the reused key's message among the dead letters listed on "+n.id, func() bool {
			r := n.api(t, http.MethodGet, "/dead-letters/messages", "")
			var page struct {
				DeadLetters []struct {
					Reason  string `json:"reason"`
					Address struct {
						ID string `json:"id"`
					} `json:"address"`
				} `json:"deadLetters"`
			}
			if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil {
				return false
			}
			reasons = reasons[:0]
			for _, it := range page.DeadLetters {
				if it.Address.ID == "z" {
					reasons = append(reasons, it.Reason)
				}
			}
			return len(reasons) == 1 && strings.Contains(reasons[0], `"key-z"`)
		})
	}
	// A repeat that came late would have been counted before a new
	// message sent after it: each address's messages are applied in the
	// order of its partition of the messages topic.
	for _, id := range []string{"x", "y", "z"} {
		put(nodes[0], id, "last-"+id, "x")
	}
	waitCounts(t, nodes, map[string]int{"x": 2, "y": 3, "z": 2}, 30*time.Second)
	replayed, err := sumMetric(nodes, "statefun_ingress_replayed_total")
	if err != nil {
		t.Fatal(err)
	}
	if replayed != 6 {
		t.Errorf("statefun_ingress_replayed_total over the nodes = %v; want 6 (two repeats of each of three keys)", replayed)
	}
}
