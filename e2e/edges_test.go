package e2e

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// egressDo sends one request to the runtime's egress and returns status,
// position header and body.
func (r *runtime) egressDo(method, path string) (int, string, string) {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.egress+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Statefun-Egress-Position"), string(b)
}

// readFirst reads the oldest record of topic without removing it, waiting
// for one to arrive.
func (r *runtime) readFirst(topic string) (pos, payload string) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		status, pos, body := r.egressDo(http.MethodGet, "/"+topic+"?after=0")
		switch status {
		case 200:
			return pos, body
		case 404:
			time.Sleep(10 * time.Millisecond)
		default:
			r.t.Fatalf("read %s: %d %s", topic, status, body)
		}
	}
	r.t.Fatalf("no record in %s", topic)
	return "", ""
}

// sendKeyed puts one message with an Idempotency-Key; it returns the status
// and whether the answer was a replay.
func (r *runtime) sendKeyed(path, typename, key, body string) (int, bool) {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, r.ingress+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd."+typename)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true"
}

// A SIGKILL between a consumer's cursor read and its acknowledgement loses
// nothing: after the restart the record is read again at the same
// position, and only the acknowledgement removes it. A client that retries
// a keyed message after a SIGKILL makes no second message.
func TestKillBetweenReadAndAck(t *testing.T) {
	fn := crashFunction(t, &sdktest.EgressSender{})
	rt := newRuntime(t, fn, []string{"crash"}, []string{"counts", "ticks"})
	rt.start()

	if status, replayed := rt.sendKeyed("/crash/counter/c", "crash/inc", "inc-1", "{}"); status != 200 || replayed {
		t.Fatalf("keyed send: %d replayed=%v", status, replayed)
	}
	pos, rec := rt.readFirst("counts")
	if rec != "c:1" {
		t.Fatalf("read %q at %s", rec, pos)
	}
	rt.kill() // the consumer read c:1 and has not acknowledged it

	rt.start()
	// The client never heard its answer, say, and retries: one message.
	if status, replayed := rt.sendKeyed("/crash/counter/c", "crash/inc", "inc-1", "{}"); status != 200 || !replayed {
		t.Fatalf("retry after the kill: %d replayed=%v, want a replay", status, replayed)
	}
	// An acknowledgement of a position not read since the start is refused.
	if status, _, body := rt.egressDo(http.MethodPost, "/counts?ack="+pos); status != http.StatusConflict {
		t.Fatalf("ack before reading again: %d %s, want 409", status, body)
	}
	if p, again := rt.readFirst("counts"); p != pos || again != "c:1" {
		t.Fatalf("after the kill: %q at %s, want c:1 at %s", again, p, pos)
	}
	if status, _, body := rt.egressDo(http.MethodPost, "/counts?ack="+pos); status != http.StatusNoContent {
		t.Fatalf("ack: %d %s", status, body)
	}
	rt.kill() // after the acknowledgement: it is durable

	rt.start()
	// An unkeyed message: if the retry had made a second message, this
	// one would report c:3.
	if status, err := rt.send("/crash/counter/c", "crash/inc", "{}"); err != nil || status != 200 {
		t.Fatalf("send: %d %v", status, err)
	}
	p, rec := rt.readFirst("counts")
	np, _ := strconv.ParseUint(p, 10, 64)
	nPos, _ := strconv.ParseUint(pos, 10, 64)
	if rec != "c:2" || np <= nPos {
		t.Fatalf("after the acknowledged kill the oldest is %q at %s, want c:2 after %s", rec, p, pos)
	}
}

// The playground egress refuses a query parameter it does not take, and a
// repeated one, with a 400 that names it, as the state API does: a
// misspelt ?after= must not pop (remove) the record it meant to read.
func TestEgressRefusesUnknownAndRepeatedParameters(t *testing.T) {
	fn := crashFunction(t, &sdktest.EgressSender{})
	rt := newRuntime(t, fn, []string{"crash"}, []string{"counts", "ticks"})
	rt.start()
	if status, _ := rt.sendKeyed("/crash/counter/c", "crash/inc", "inc-1", "{}"); status != 200 {
		t.Fatalf("send: %d", status)
	}
	pos, rec := rt.readFirst("counts")
	for _, c := range []struct{ method, path, says string }{
		{http.MethodGet, "/counts?aftr=0", `unknown query parameter "aftr"`},
		{http.MethodGet, "/counts?after=0&after=" + pos, `"after" is repeated`},
		{http.MethodPost, "/counts?ack=" + pos + "&ack=" + pos, `"ack" is repeated`},
		{http.MethodPost, "/counts?ack=" + pos + "&after=0", `unknown query parameter "after"`},
	} {
		status, _, body := rt.egressDo(c.method, c.path)
		if status != http.StatusBadRequest || !strings.Contains(body, c.says) {
			t.Errorf("%s %s: %d %q; want 400 saying %s", c.method, c.path, status, body, c.says)
		}
	}
	if p2, rec2 := rt.readFirst("counts"); p2 != pos || rec2 != rec {
		t.Fatalf("after the refused requests the oldest record is %q at %s; want %q at %s still there", rec2, p2, rec, pos)
	}
}
