package stateapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
)

// acrossEngine is the engine of a cluster node whose re-sends all go to
// another partition's owner: Resend answers as engine.resendAcross does
// once the dead letter's removal and the command are committed (an
// AckAccepted receipt, no inbox key).
type acrossEngine struct {
	*engine.Engine
}

func (e acrossEngine) Resend(_ context.Context, r engine.ResendRequest) (partition.Receipt, partition.InboxKey, error) {
	return partition.Receipt{Mutation: r.Mutation, Addr: *r.Target, Ack: engine.AckAccepted}, partition.InboxKey{}, nil
}

// skipQueued sends a message to test/fn/<id>, which must be paused,
// waits until it is queued, skips it through the API at base and returns
// the dead letter's id.
func skipQueued(t *testing.T, base string, eng *engine.Engine, id string) string {
	t.Helper()
	ingest(t, eng, id)
	waitFor(t, "the message queued behind the pause", func() bool {
		var in inboxJSON
		send(t, base, "GET", "/inbox/test/fn/"+id, nil).json(t, &in)
		return in.Queued.Count == 1
	})
	var rc repairReceiptJSON
	send(t, base, "POST", "/inbox/test/fn/"+id+"/skip", []byte(`{"reason":"skip it"}`)).json(t, &rc)
	if rc.DeadLetter == "" {
		t.Fatal("the skip named no dead letter")
	}
	return rc.DeadLetter
}

// serveOn serves an API over eng, any Engine, and st on httptest.
func serveOn(t testing.TB, eng Engine, st Store, opts Options) string {
	srv := httptest.NewServer(New(eng, st, opts).Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	return srv.URL
}

// receiptNodes is the cluster as the node that sent a re-send across sees
// it: it owns every partition, and Gather answers a receipt's lookup as
// answer says (nil: no node has it), recording the lookups.
type receiptNodes struct {
	fakeCluster
	answer func() *forward.Answer
	mu     sync.Mutex
	looked []string // "path?query hop=<PartitionHeader>"
}

func (c *receiptNodes) Gather(r *http.Request, _ time.Duration, _ func(forward.Answer) bool) ([]forward.Answer, []int) {
	c.mu.Lock()
	c.looked = append(c.looked, r.URL.Path+"?"+r.URL.RawQuery+" partition="+r.Header.Get(PartitionHeader))
	c.mu.Unlock()
	if a := c.answer(); a != nil {
		return []forward.Answer{*a}, nil
	}
	return nil, []int{0, 1, 2, 3}
}

// TestResendAcrossAnswersTheOwnersReceipt: a re-send that went to another
// partition's owner as a command is answered once that owner's receipt is
// final — read from every node with ?wait=, without the partition the
// request was sent for — as a committed re-send without an inbox key; a
// receipt that is not final within MaxWait, or that the token may not
// read, is a 202 naming it in Location.
func TestResendAcrossAnswersTheOwnersReceipt(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	direct := serve(t, eng, Options{Cluster: allOwned()})
	if r := send(t, direct, "POST", "/pause/test/fn/z", nil); r.StatusCode != 200 {
		t.Fatalf("pause: %s %s", r.Status, r.body)
	}
	skip := func() string {
		t.Helper()
		return "/dead-letters/messages/" + url.PathEscape(skipQueued(t, direct, eng, "z")) + "/resend"
	}
	body := []byte(`{"target":{"namespace":"test","type":"fn","id":"far"}}`)
	type resent struct {
		Mutation string      `json:"mutation"`
		Status   string      `json:"status"`
		Address  addressJSON `json:"address"`
		InboxKey *string     `json:"inboxKey"`
	}

	var mutation string
	owned := fakeCluster{owned: []int{0, 1, 2, 3}}
	committed := &receiptNodes{fakeCluster: owned, answer: func() *forward.Answer {
		return &forward.Answer{Node: "node-b", Status: 200, Body: []byte(`{"mutation":"` + mutation + `","status":"committed","checkpoint":7}`)}
	}}
	base := serveOn(t, acrossEngine{eng}, eng.Reads(), Options{Cluster: committed})
	r := send(t, base, "POST", skip(), body, "Content-Type", "application/json", forward.Header, "node-c", PartitionHeader, "2")
	var out resent
	r.json(t, &out)
	mutation = out.Mutation
	if r.StatusCode != 200 || out.Status != "committed" || out.Address.ID != "far" || out.InboxKey != nil {
		t.Errorf("a re-send across whose receipt is committed: %s %s; want 200 committed for far, without an inbox key", r.Status, r.body)
	}
	if len(committed.looked) != 1 || committed.looked[0] != "/mutations/"+out.Mutation+"?wait=5s partition=" {
		t.Errorf("receipt lookups %q; want one of /mutations/%s with ?wait=5s and no partition header", committed.looked, out.Mutation)
	}

	for name, c := range map[string]*receiptNodes{
		"not final in time": {fakeCluster: owned, answer: func() *forward.Answer {
			return &forward.Answer{Node: "node-b", Status: 200, Body: []byte(`{"status":"accepted"}`)}
		}},
		"nowhere": {fakeCluster: owned, answer: func() *forward.Answer { return nil }},
		"no read scope": {fakeCluster: owned, answer: func() *forward.Answer {
			return &forward.Answer{Node: "node-b", Status: 403, Body: []byte(`{"detail":"read scope needed"}`)}
		}},
	} {
		base := serveOn(t, acrossEngine{eng}, eng.Reads(), Options{Cluster: c, MaxWait: 200 * time.Millisecond})
		r := send(t, base, "POST", skip(), body, "Content-Type", "application/json")
		var out resent
		r.json(t, &out)
		if r.StatusCode != 202 || out.Status != "accepted" || out.Address.ID != "far" || r.Header.Get("Location") != "/mutations/"+out.Mutation {
			t.Errorf("%s: %s %s (Location %q); want 202 accepted naming the receipt", name, r.Status, r.body, r.Header.Get("Location"))
		}
		if name == "no read scope" && len(c.looked) != 1 {
			t.Errorf("%s: %d lookups; want one, then the 202", name, len(c.looked))
		}
	}
}
