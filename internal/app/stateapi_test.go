package app

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func call(t *testing.T, method, url, contentType, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// A smoke test of the state API over a running app: read what the function
// wrote, overwrite it, and see the function continue from the new value.
func TestStateAPIReadWriteThroughFunction(t *testing.T) {
	dir := t.TempDir()
	a, in, out := startApp(t, dir, counterFunctions(t))
	defer a.Close()
	api := "http://" + a.Addr("admin")
	send(t, in, "/test/counter/alice", "x")
	if got := poll(t, out, 1); len(got) != 1 || got[0] != "alice=1" {
		t.Fatalf("%v", got)
	}
	resp, body := call(t, "GET", api+"/state/test/counter/alice/count", "", "", "Accept", "text/plain")
	if resp.StatusCode != 200 || body != "1" || resp.Header.Get("Statefun-Type") != "io.statefun.types/int" || resp.Header.Get("ETag") == "" {
		t.Fatalf("GET: %s %q %v", resp.Status, body, resp.Header)
	}
	etag := resp.Header.Get("ETag")
	resp, body = call(t, "PUT", api+"/state/test/counter/alice/count", "text/plain", "41", "If-Match", etag)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: %s %s", resp.Status, body)
	}
	var rc map[string]any
	json.Unmarshal([]byte(body), &rc)
	if rc["status"] != "committed" {
		t.Fatalf("receipt %v", rc)
	}
	resp, body = call(t, "PUT", api+"/state/test/counter/alice/count", "text/plain", "5", "If-Match", etag)
	if resp.StatusCode != 412 {
		t.Fatalf("stale If-Match: %s %s", resp.Status, body)
	}
	send(t, in, "/test/counter/alice", "x")
	if got := poll(t, out, 1); len(got) != 1 || got[0] != "alice=42" {
		t.Fatalf("the function must continue from the written value: %v", got)
	}
	resp, body = call(t, "GET", api+"/state/test/counter/alice/count", "", "", "Accept", "application/json")
	if resp.StatusCode != 200 || !strings.Contains(body, `"value":42`) {
		t.Fatalf("GET json: %s %s", resp.Status, body)
	}
	resp, body = call(t, "GET", api+"/audit", "", "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"principal": "anonymous"`) {
		t.Fatalf("audit: %s %s", resp.Status, body)
	}
}
