package e2e

import (
	"encoding/json"
	"io"
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
		req, _ := http.NewRequest(http.MethodPut, n.ingress+"/kc/counter/"+id, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/vnd.kc/text")
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %s with key %s to %s: %d %s", id, key, n.id, resp.StatusCode, b)
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
	// z's owner, listed from any node (the listing is gathered).
	var reasons []string
	waitFor(t, 30*time.Second, "the reused key's message among the dead letters", func() bool {
		reasons = reasons[:0]
		for _, n := range nodes[:1] {
			resp, err := http.Get("http://" + n.admin + "/dead-letters/messages")
			if err != nil {
				return false
			}
			var page struct {
				DeadLetters []struct {
					Reason  string `json:"reason"`
					Address struct {
						ID string `json:"id"`
					} `json:"address"`
				} `json:"deadLetters"`
			}
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if err != nil {
				return false
			}
			for _, it := range page.DeadLetters {
				if it.Address.ID == "z" {
					reasons = append(reasons, it.Reason)
				}
			}
		}
		return len(reasons) == 1 && strings.Contains(reasons[0], `"key-z"`)
	})
	// Nothing more arrives later.
	time.Sleep(time.Second)
	waitCounts(t, nodes, map[string]int{"x": 1, "y": 2, "z": 1}, 10*time.Second)
	var replayed float64
	for _, n := range nodes {
		v, _ := n.metric("statefun_ingress_replayed_total")
		replayed += v
	}
	if replayed != 6 {
		t.Errorf("statefun_ingress_replayed_total over the nodes = %v; want 6 (two repeats of each of three keys)", replayed)
	}
}
