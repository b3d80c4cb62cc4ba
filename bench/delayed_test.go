package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

var (
	flagDelayed       = flag.Int("delayed.messages", envInt("STATEFUN_BENCH_DELAYED", 1_000_000), "delayed messages pending in BenchmarkDelayedMemory")
	flagDelayedBinary = flag.String("delayed.binary", envStr("STATEFUN_BENCH_DELAYED_BINARY", ""), "the statefun binary BenchmarkDelayedMemory runs (empty: built from this tree)")
	flagDelayedWindow = flag.Int("delayed.window", envInt("STATEFUN_BENCH_DELAYED_WINDOW", 0), "--timer-window of the runtime (0: leave the flag out, for a build without it)")
)

// BenchmarkDelayedMemory measures what -delayed.messages pending delayed
// messages (default 1,000,000, an hour away, 1,000 per request) cost the
// runtime: a statefun binary (built from this tree without the race
// detector, or -delayed.binary) in a process of its own, on a fresh store,
// calls sdktest/features (official Go SDK, served in this process), whose
// senders schedule them. It reports the runtime's resident set size (RSS)
// and goroutines once they are scheduled, its peak RSS, and both again
// after a SIGKILL and restart that holds them, with the time the restart
// took and the delayed messages the partitions hold in memory
// (statefun_delayed_in_memory).
func BenchmarkDelayedMemory(b *testing.B) {
	bin := *flagDelayedBinary
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "statefun")
		build := exec.Command("go", "build", "-o", bin, "github.com/statefun-go/statefun/cmd/statefun")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	fs := sdktest.StartFeatureServer(b)
	for range b.N {
		runDelayedMemory(b, bin, fs.URL)
	}
}

func runDelayedMemory(b *testing.B, bin, fnURL string) {
	dir := b.TempDir()
	ingress, admin := freePort(b), freePort(b)
	module := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
    call: 60s
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
`, fnURL, ingress)
	modPath := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(modPath, []byte(module), 0o644); err != nil {
		b.Fatal(err)
	}
	args := []string{"run", "--module", modPath, "--data-dir", filepath.Join(dir, "data"), "--admin-addr", fmt.Sprintf("127.0.0.1:%d", admin)}
	if *flagDelayedWindow > 0 {
		args = append(args, "--timer-window", strconv.Itoa(*flagDelayedWindow))
	}
	var logs bytes.Buffer
	start := func() (*exec.Cmd, time.Duration) {
		t0 := time.Now()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		for {
			if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", admin)); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return cmd, time.Since(t0)
				}
			}
			if time.Since(t0) > 10*time.Minute {
				b.Fatalf("statefun not ready after 10 minutes:\n%s", logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cmd, _ := start()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	const perReq = 1000
	client := &http.Client{Timeout: 5 * time.Minute}
	send := func(id string, c sdktest.Command) {
		body, _ := json.Marshal(c)
		req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("http://127.0.0.1:%d/%s/%s", ingress, sdktest.FeaturesFn, id), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/vnd."+sdktest.CommandType)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("ingress: status %d\n%s", resp.StatusCode, logs.String())
		}
	}
	b.ResetTimer()
	t0 := time.Now()
	total := *flagDelayed
	for r := 0; r*perReq < total; r++ {
		// A few requests ahead of the function at most: what is measured
		// is the delayed messages, not a backlog of requests.
		for r%8 == 0 && adminMetrics(b, admin)["statefun_queue_depth"] > 8 {
			time.Sleep(20 * time.Millisecond)
		}
		var cmds []sdktest.Command
		for i := 0; i < perReq && r*perReq+i < total; i++ {
			cmds = append(cmds, sdktest.Command{Op: sdktest.OpSendAfter, To: &sdktest.Target{ID: fmt.Sprint("sink-", i%1000)},
				DelayMs: time.Hour.Milliseconds(), Token: fmt.Sprint("t", i),
				Command: &sdktest.Command{Op: sdktest.OpReport, Tag: fmt.Sprintf("delayed-%d-%d", r, i)}})
		}
		send(fmt.Sprint("sender-", r), sdktest.Command{Op: sdktest.OpSeq, Commands: cmds})
	}
	// The ingress answered once each request was durable in an inbox; the
	// function has answered them all once no partition has work queued.
	idle := func() {
		for quiet := 0; quiet < 3; {
			m := adminMetrics(b, admin)
			if m["statefun_retries_total"] > 0 {
				b.Fatalf("the function failed %v calls:\n%s", m["statefun_retries_total"], tail(logs.String(), 4000))
			}
			if m["statefun_queue_depth"] == 0 {
				quiet++
			} else {
				quiet = 0
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	idle()
	scheduled := time.Since(t0)
	m := adminMetrics(b, admin)
	rss, hwm := procMemory(cmd.Process.Pid)
	b.Logf("%d delayed messages scheduled in %v: RSS %d MiB (peak %d MiB), Go heap in use %d MiB, %v goroutines, %v held in memory",
		total, scheduled.Round(time.Millisecond), rss>>20, hwm>>20, int64(m["go_memstats_heap_inuse_bytes"])>>20, m["go_goroutines"], m["statefun_delayed_in_memory"])
	b.ReportMetric(float64(rss>>20), "rss-MiB")
	b.ReportMetric(float64(hwm>>20), "peak-rss-MiB")
	b.ReportMetric(m["go_goroutines"], "goroutines")

	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	cmd, took := start()
	idle()
	m = adminMetrics(b, admin)
	rss, hwm = procMemory(cmd.Process.Pid)
	b.Logf("restarted in %v holding them: RSS %d MiB (peak %d MiB), Go heap in use %d MiB, %v goroutines, %v held in memory",
		took.Round(time.Millisecond), rss>>20, hwm>>20, int64(m["go_memstats_heap_inuse_bytes"])>>20, m["go_goroutines"], m["statefun_delayed_in_memory"])
	b.ReportMetric(float64(rss>>20), "restart-rss-MiB")
	b.ReportMetric(float64(hwm>>20), "restart-peak-rss-MiB")
	b.ReportMetric(m["go_goroutines"], "restart-goroutines")
	b.ReportMetric(took.Seconds(), "restart-s")
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// adminMetrics sums the samples of every metric on the admin listener's
// /metrics by name.
func adminMetrics(b *testing.B, port int) map[string]float64 {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(key, "{")
		v, _ := strconv.ParseFloat(val, 64)
		out[name] += v
	}
	return out
}

// procMemory reads a process's resident set size and its peak, in bytes.
func procMemory(pid int) (rss, hwm int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm
}
