package app

import (
	"strings"
	"testing"
)

// The admin listener shows what an operator watches: health, readiness,
// and the engine's metrics once traffic has flowed.
func TestAdminHealthAndMetrics(t *testing.T) {
	dir := t.TempDir()
	a, in, out := startApp(t, dir, counterFunctions(t))
	defer a.Close()
	send(t, in, "/test/counter/m", "x")
	poll(t, out, 1)
	admin := "http://" + a.Addr("admin")
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, body := call(t, "GET", admin+path, "", ""); resp.StatusCode != 200 {
			t.Fatalf("%s: %s %s", path, resp.Status, body)
		}
	}
	resp, body := call(t, "GET", admin+"/metrics", "", "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	for _, m := range []string{
		`statefun_invocations_total{function="test/counter",outcome="ok"}`,
		"statefun_batch_size_count", "statefun_call_seconds_count", "statefun_commit_seconds_count",
		"statefun_commit_ops_count", "statefun_commit_bytes_count", `statefun_queue_depth{partition="0"}`,
		"statefun_ingress_messages_total 1",
	} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}
