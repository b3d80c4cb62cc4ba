package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"

	"github.com/statefun-go/statefun/internal/store"
)

// echoFunctions is an official-SDK function server: test/echo counts its
// messages and reports "<body>#<count>" of each on the "out" topic, so the
// egress shows every message that ran, in order, and how many ran.
func echoFunctions(t *testing.T) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("test/echo"),
		States:       []statefun.ValueSpec{countSpec},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int32
			ctx.Storage().Get(countSpec, &n)
			n++
			ctx.Storage().Set(countSpec, n)
			ctx.SendEgress(statefun.GenericEgressBuilder{
				Target:    statefun.TypeNameFrom("io.statefun.playground/egress"),
				Value:     egressRecord{Topic: "out", Payload: fmt.Sprintf("%s#%d", msg.RawValue(), n)},
				ValueType: recordType,
			})
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// sendKey sends body to path with an Idempotency-Key (none when key is
// ""); it returns the status, whether the answer says it was replayed, and
// the answer's text.
func sendKey(t *testing.T, ingress, path, key, body string) (int, bool, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, ingress+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.test/ping")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)
}

// ranUntil pops the egress until a record starting with marker came and
// returns every record popped, in order.
func ranUntil(t *testing.T, egress, marker string) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got = append(got, poll(t, egress, 1)...)
		if len(got) > 0 && strings.HasPrefix(got[len(got)-1], marker) {
			return got
		}
	}
	t.Fatalf("the marker %q never ran; records %v", marker, got)
	return nil
}

// The same key twice is one message: the second answer repeats the first
// and says so. The key with another body is refused with 422 naming the
// header. (A marker message sent last, without a key, shows everything
// before it has run: a duplicate would have run before it.)
func TestIngressIdempotencyKeyOneMessage(t *testing.T) {
	a, in, out := startApp(t, t.TempDir(), echoFunctions(t))
	defer a.Close()
	for i := range 3 {
		status, replayed, body := sendKey(t, in, "/test/echo/ada", `"order-1"`, "first")
		if status != 200 || replayed != (i > 0) {
			t.Fatalf("send %d: %d replayed=%v %s", i, status, replayed, body)
		}
	}
	status, _, body := sendKey(t, in, "/test/echo/ada", `"order-1"`, "changed")
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, "Idempotency-Key") {
		t.Fatalf("the key with another body: %d %q, want 422 naming Idempotency-Key", status, body)
	}
	if status, _, body := sendKey(t, in, "/test/echo/ada", "bad key", "x"); status != 400 || !strings.Contains(body, "Idempotency-Key") {
		t.Fatalf("a malformed key: %d %q, want 400 naming Idempotency-Key", status, body)
	}
	sendKey(t, in, "/test/echo/ada", "", "marker")
	if got := ranUntil(t, out, "marker"); !slices.Equal(got, []string{"first#1", "marker#2"}) {
		t.Fatalf("the function ran %v, want [first#1 marker#2]", got)
	}
}

// Many clients sending the same key at once: exactly one makes the
// message; the others are answered 409 (the first is in progress) or 200
// replayed.
func TestIngressIdempotencyKeyConcurrent(t *testing.T) {
	a, in, out := startApp(t, t.TempDir(), echoFunctions(t))
	defer a.Close()
	const n = 16
	var (
		wg                      sync.WaitGroup
		made, replayed, retried atomic.Int32
		bad                     atomic.Value
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPut, in+"/test/echo/ada", strings.NewReader("first"))
			req.Header.Set("Content-Type", "application/vnd.test/ping")
			req.Header.Set("Idempotency-Key", "k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				bad.Store(err.Error())
				return
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == 200 && resp.Header.Get("Idempotent-Replayed") == "true":
				replayed.Add(1)
			case resp.StatusCode == 200:
				made.Add(1)
			case resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") != "":
				retried.Add(1)
			default:
				bad.Store(resp.Status)
			}
		}()
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatalf("an answer was %v", b)
	}
	if made.Load() != 1 || replayed.Load()+retried.Load() != n-1 {
		t.Fatalf("made %d, replayed %d, in progress %d; want exactly one made", made.Load(), replayed.Load(), retried.Load())
	}
	t.Logf("made 1, replayed %d, answered 409 %d", replayed.Load(), retried.Load())
	sendKey(t, in, "/test/echo/ada", "", "marker")
	if got := ranUntil(t, out, "marker"); !slices.Equal(got, []string{"first#1", "marker#2"}) {
		t.Fatalf("the function ran %v, want [first#1 marker#2]", got)
	}
}

// Keys live as long as the idempotency retention: the sweeper forgets a key
// past its age, and the same key then makes a new message.
func TestIngressIdempotencyKeyRetention(t *testing.T) {
	var offset atomic.Int64 // how far the store's clock is ahead
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	a, in, out := startAppWith(t, t.TempDir(), echoFunctions(t), func(c *Config) {
		c.Store.Retention = store.Retention{IdempotencyAge: time.Hour}
		c.Store.SweepInterval = -1
		c.Store.Now = clock
	})
	defer a.Close()
	if status, replayed, _ := sendKey(t, in, "/test/echo/ada", "k", "first"); status != 200 || replayed {
		t.Fatalf("first: %d replayed=%v", status, replayed)
	}
	offset.Store(int64(59 * time.Minute))
	if st, err := a.db.Sweep(); err != nil || st.Idempotency != 1 {
		t.Fatalf("sweep within the age: %+v %v", st, err)
	}
	if status, replayed, _ := sendKey(t, in, "/test/echo/ada", "k", "first"); status != 200 || !replayed {
		t.Fatalf("within the age: %d replayed=%v, want a replay", status, replayed)
	}
	offset.Store(int64(61 * time.Minute))
	if st, err := a.db.Sweep(); err != nil || st.DeletedIdempotency != 1 || st.Idempotency != 0 {
		t.Fatalf("sweep past the age: %+v %v", st, err)
	}
	if status, replayed, _ := sendKey(t, in, "/test/echo/ada", "k", "first"); status != 200 || replayed {
		t.Fatalf("past the age: %d replayed=%v, want a new message", status, replayed)
	}
	if got := ranUntil(t, out, "first#2"); !slices.Equal(got, []string{"first#1", "first#2"}) {
		t.Fatalf("the function ran %v", got)
	}
}

// egressCall sends one request to the egress and returns status, position
// header and body.
func egressCall(t *testing.T, method, url string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Statefun-Egress-Position"), string(b)
}

// readWhenThere reads the egress topic after a position until a record is
// there.
func readWhenThere(t *testing.T, egress string, after string) (pos, payload string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		status, pos, body := egressCall(t, http.MethodGet, egress+"/out?after="+after)
		switch status {
		case 200:
			return pos, body
		case 404:
			time.Sleep(10 * time.Millisecond)
		default:
			t.Fatalf("read after %s: %d %s", after, status, body)
		}
	}
	t.Fatalf("no record after %s", after)
	return "", ""
}

// A consumer that reads, crashes before acknowledging, and reads again gets
// the same record; its acknowledgement removes what it read; acknowledging
// again is harmless; after a restart a position not read since is refused
// (409) until read again; the record keeps its position across the restart.
func TestEgressCursorReadAndAck(t *testing.T) {
	dir, fn := t.TempDir(), echoFunctions(t)
	a, in, out := startApp(t, dir, fn)
	for _, body := range []string{"a", "b", "c"} {
		if status, _, msg := sendKey(t, in, "/test/echo/x", "", body); status != 200 {
			t.Fatalf("send: %d %s", status, msg)
		}
	}
	p1, rec := readWhenThere(t, out, "0")
	if rec != "a#1" || p1 == "" {
		t.Fatalf("first read: %q at %q", rec, p1)
	}
	// The consumer "crashes" here and starts over from 0.
	if p, again := readWhenThere(t, out, "0"); p != p1 || again != rec {
		t.Fatalf("read again: %q at %q, want %q at %q", again, p, rec, p1)
	}
	p2, rec2 := readWhenThere(t, out, p1)
	if rec2 != "b#2" {
		t.Fatalf("read after %s: %q", p1, rec2)
	}
	if status, _, body := egressCall(t, http.MethodPost, out+"/out?ack="+p2); status != http.StatusNoContent {
		t.Fatalf("ack %s: %d %s", p2, status, body)
	}
	p3, rec3 := readWhenThere(t, out, "0")
	if rec3 != "c#3" {
		t.Fatalf("after acknowledging a and b the oldest is %q", rec3)
	}
	if status, _, body := egressCall(t, http.MethodPost, out+"/out?ack="+p1); status != http.StatusNoContent {
		t.Fatalf("ack again: %d %s", status, body)
	}
	if _, again := readWhenThere(t, out, "0"); again != "c#3" {
		t.Fatalf("a repeated ack removed c: the oldest is %q", again)
	}

	// The runtime restarts between the consumer's read and its ack.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a, _, out = startApp(t, dir, fn)
	defer a.Close()
	status, _, body := egressCall(t, http.MethodPost, out+"/out?ack="+p3)
	if status != http.StatusConflict || !strings.Contains(body, "not read") {
		t.Fatalf("ack of a position not read since the restart: %d %q, want 409", status, body)
	}
	if p, again := readWhenThere(t, out, "0"); p != p3 || again != "c#3" {
		t.Fatalf("after the restart: %q at %q, want c#3 at %s", again, p, p3)
	}
	if status, _, body := egressCall(t, http.MethodPost, out+"/out?ack="+p3); status != http.StatusNoContent {
		t.Fatalf("ack after reading again: %d %s", status, body)
	}
	if status, _, _ := egressCall(t, http.MethodGet, out+"/out?after=0"); status != 404 {
		t.Fatalf("after acknowledging all: %d, want 404", status)
	}
	for _, bad := range []string{"/out?ack=x", "/out?ack=-1", "/out"} {
		if status, _, body := egressCall(t, http.MethodPost, out+bad); status != 400 || !strings.Contains(body, "ack") {
			t.Fatalf("POST %s: %d %q, want 400 naming ack", bad, status, body)
		}
	}
	if status, _, body := egressCall(t, http.MethodGet, out+"/out?after=soon"); status != 400 || !strings.Contains(body, "after") {
		t.Fatalf("GET after=soon: %d %q, want 400 naming after", status, body)
	}
	if status, _, _ := egressCall(t, http.MethodDelete, out+"/out"); status != 405 {
		t.Fatalf("DELETE: %d, want 405", status)
	}
}
