package app

import (
	"fmt"
	"os"
	"runtime"
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
	// Every statefun_ family the runtime exports is in the generated
	// metrics reference: a metric defined where the generator does not
	// look would be missing from it.
	ref, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(body, "\n") {
		name, ok := strings.CutPrefix(line, "# HELP ")
		if !ok || !strings.HasPrefix(name, "statefun_") {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		n++
		if !strings.Contains(string(ref), "| `"+name+"` |") {
			t.Errorf("/metrics exports %s, which docs/reference/metrics.md lacks: regenerate it (go run ./cmd/statefun gen-docs) or teach internal/metricsdoc to find it", name)
		}
	}
	if n < 20 {
		t.Errorf("/metrics exports %d statefun_ families; want the 20 and more of a running runtime", n)
	}
}

// The admin listener is in the lane (internal/lane): while the load's hot
// paths poke, its requests are woken by them, and /metrics counts it;
// NoAdminLane serves it like any other listener.
func TestAdminLane(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoAdminLane=%v", off), func(t *testing.T) {
			a, _, _ := startAppWith(t, t.TempDir(), counterFunctions(t), func(c *Config) { c.NoAdminLane = off })
			defer a.Close()
			admin := "http://" + a.Addr("admin")

			// Stand in for a busy runtime's hot paths on one processor,
			// where Go asks its network poller only now and then.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
						a.lane.Poke()
						runtime.Gosched()
					}
				}
			}()
			before := a.lane.Woken()
			for range 20 {
				if resp, body := call(t, "GET", admin+"/healthz", "", ""); resp.StatusCode != 200 {
					t.Fatalf("/healthz: %s %s", resp.Status, body)
				}
			}
			close(stop)
			<-done
			woke := a.lane.Woken() - before

			_, body := call(t, "GET", admin+"/metrics", "", "")
			has := strings.Contains(body, "statefun_admin_lane_wakes_total")
			switch {
			case !off && (woke == 0 || !has):
				t.Errorf("lane on: %d requests woken by Poke, metric shown %v; want some, and the metric", woke, has)
			case off && (woke != 0 || has):
				t.Errorf("lane off: %d requests woken by Poke, metric shown %v; want none, and no metric", woke, has)
			}
		})
	}
}
