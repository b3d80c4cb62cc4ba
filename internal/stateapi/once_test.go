package stateapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// A change another node sends once (a restore here), under the mutation id
// that node gave it, applies once however often it comes and whatever
// happens to the request that brought it: the first request gives up
// while the change waits behind an invocation of its address; a repeat
// waits for that application and gets its answer; a later repeat gets the
// same answer; a node without the first's answer (one the partition moved
// to, sharing the store here) answers from the id's receipt. One audit
// record.
func TestChangeSentOnceAppliesOnce(t *testing.T) {
	entered, release := make(chan string), make(chan struct{})
	eng := startEngine(t, engineConfig{fnURL: startSlowFunction(t, entered, release)})
	api := New(eng, eng.Reads(), Options{Cluster: allOwned()})
	srv := httptest.NewServer(api.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	// Before the server closes, which waits for the requests it serves.
	t.Cleanup(func() { close(release) })
	slow := address.TypeName{Namespace: "test", Name: "slow"}
	const entry = "/state/test/slow/x/n"

	// n = 1, at the point the restore goes back to.
	ingestTo(t, eng, slow, "x")
	<-entered
	release <- struct{}{}
	waitFor(t, "n = 1", func() bool {
		r := send(t, srv.URL, "GET", entry, nil, "Accept", "text/plain")
		return r.StatusCode == 200 && string(r.body) == "1"
	})
	point := "asOfTime=" + time.Now().UTC().Format(time.RFC3339Nano)
	// An invocation in flight, which will set n = 2; the restore to n = 1
	// waits behind it in the address's mailbox.
	ingestTo(t, eng, slow, "x")
	<-entered

	id := api.newMutationID()
	restore := func(ctx context.Context, base string) (*http.Response, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+entry+"?"+point, nil)
		req.Header.Set(forward.Header, "node-a")
		req.Header.Set(MutationIDHeader, id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	// The sender gives up while the change waits.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		resp, body, err := restore(ctx, srv.URL)
		if err == nil {
			t.Logf("the first request: %s %s", resp.Status, body)
		}
		gaveUp <- err
	}()
	waitFor(t, "the restore to be taken", func() bool {
		api.onces.mu.Lock()
		defer api.onces.mu.Unlock()
		return api.onces.m[id] != nil
	})
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("the first request was answered while the invocation ran")
	}
	// It sends the change again: the repeat waits for the application the
	// first request started.
	type answer struct {
		resp *http.Response
		body string
		err  error
	}
	repeat := make(chan answer, 1)
	go func() {
		resp, body, err := restore(context.Background(), srv.URL)
		repeat <- answer{resp, body, err}
	}()
	release <- struct{}{}
	first := <-repeat
	if first.err != nil || first.resp.StatusCode != 200 || !strings.Contains(first.body, `"mutation": "`+id+`"`) {
		t.Fatalf("the repeat: %v %v %s", first.err, first.resp, first.body)
	}
	if r := send(t, srv.URL, "GET", entry, nil, "Accept", "text/plain"); string(r.body) != "1" {
		t.Errorf("n after the invocation and the restore = %s, want 1", r.body)
	}

	// Again: the same answer.
	if resp, body, err := restore(context.Background(), srv.URL); err != nil || resp.StatusCode != 200 || body != first.body {
		t.Errorf("a later repeat: %v %v %s, want %s", err, resp, body, first.body)
	}
	// On a node that did not see it: the id's receipt.
	other := serve(t, eng, Options{Cluster: allOwned()})
	if resp, body, err := restore(context.Background(), other); err != nil || resp.StatusCode != 200 || !strings.Contains(body, `"mutation": "`+id+`"`) {
		t.Errorf("a repeat on another node: %v %v %s", err, resp, body)
	}
	var audit struct {
		Records []auditJSON `json:"records"`
	}
	// Asked of this node alone (allOwned gathers nothing).
	send(t, srv.URL, "GET", "/audit?mutation="+id, nil, forward.Header, "test").json(t, &audit)
	if len(audit.Records) != 1 {
		t.Errorf("%d audit records of %s, want 1: %+v", len(audit.Records), id, audit.Records)
	}
}
