package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	runRole()
	isolate()
	os.Exit(m.Run())
}

// needRestate returns the Restate binaries, and skips the test when npm
// has not installed them here (node_modules is missing); a node_modules
// without them is a failure.
func needRestate(t *testing.T) (server, cli string) {
	t.Helper()
	if _, err := os.Stat("node_modules"); errors.Is(err, os.ErrNotExist) {
		t.Skip("bench/restate/node_modules is missing: run `npm ci` in bench/restate to install restate-server and the restate CLI")
	}
	server, cli, err := restateBinaries("node_modules")
	if err != nil {
		t.Fatal(err)
	}
	return server, cli
}

// tinyConfig is a workload small enough for a test.
func tinyConfig(t *testing.T) config {
	return config{Keys: []int{1, 3}, Messages: 12, Reads: 6, Writes: 4, Clients: 4,
		MaxTime: time.Minute, RestartKeys: 20, FillTime: time.Minute,
		ProfileDir: t.TempDir(), ProfileMsgs: 30, Log: testLog{t}}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCountersEndAtExpectedValues starts both systems, sends the same
// increments through each one's ingress and checks each counter through
// each one's state access, through Restate's own request-response call and
// CLI, and after a restart.
func TestCountersEndAtExpectedValues(t *testing.T) {
	server, cli := needRestate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const keys, perKey = 3, 5
	for _, s := range []system{
		newStatefunSystem(filepath.Join(dir, "statefun"), 8, false),
		newRestateSystem(filepath.Join(dir, "restate"), server, cli, 8),
	} {
		t.Run(s.Name(), func(t *testing.T) {
			defer s.Close()
			defer func() {
				if t.Failed() {
					for _, l := range s.Logs() {
						b, _ := os.ReadFile(l)
						t.Logf("%s:\n%s", l, tail(b))
					}
				}
			}()
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			before, err := s.Applied(ctx)
			if err != nil {
				t.Fatal(err)
			}
			res, err := drive(ctx, keys*perKey, 4, time.Minute, func(ctx context.Context, i int) error {
				return s.Increment(ctx, key("t-", i%keys))
			})
			if err != nil || res.OK != keys*perKey {
				t.Fatalf("sent %d of %d increments: %v", res.OK, keys*perKey, err)
			}
			if err := pollUntil(ctx, 10*time.Millisecond, time.Minute, "applied", func() (bool, error) {
				n, err := s.Applied(ctx)
				return n-before >= keys*perKey, err
			}); err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				if err := waitCount(ctx, s, key("t-", i), perKey, 30*time.Second); err != nil {
					t.Error(err)
				}
			}
			if r, ok := s.(*restateSystem); ok {
				// The same handler through the request-response ingress
				// emits the new value; the CLI reads it back.
				if n, err := r.call(ctx, key("t-", 0)); err != nil || n != perKey+1 {
					t.Errorf("Counter/t-0/add answered %d, %v; want %d", n, err, perKey+1)
				}
				out, err := r.cliGet(ctx, key("t-", 0))
				var state map[string]any
				if err != nil || json.Unmarshal([]byte(out), &state) != nil || state[restateState] != float64(perKey+1) {
					t.Errorf("restate kv get Counter t-0 printed %q (%v); want count %d", out, err, perKey+1)
				}
			}
			if err := s.Write(ctx, key("t-", 1), 41); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := pollUntil(ctx, 10*time.Millisecond, time.Minute, "state after restart", func() (bool, error) {
				n, found, err := s.Read(ctx, key("t-", 1))
				return err == nil && found && n == 41, nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRunWritesItsSection runs the whole harness on a tiny workload and
// checks the report: the section between the markers is replaced, the
// rest of the file is kept, and the chart is a PNG.
func TestRunWritesItsSection(t *testing.T) {
	needRestate(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "benchmarks.md")
	before := "# Benchmarks\n\nThe other engineer's section.\n\n" + beginMarker + "\nstale figures\n" + endMarker + "\n\n## After\n"
	if err := os.WriteFile(out, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options{cfg: tinyConfig(t), out: out, chart: filepath.Join(dir, "chart.png"), nodeModules: "node_modules",
		workDir: filepath.Join(dir, "work"), systems: "statefun,restate", command: "go test"}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := measure(ctx, o)
	if err != nil {
		logs, _ := filepath.Glob(filepath.Join(o.workDir, "*", "*", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, tail(b))
		}
		t.Fatal(err)
	}
	for _, sr := range []*systemResults{res.Ours, res.Theirs} {
		for _, k := range o.cfg.Keys {
			if inc := sr.Inc[k]; inc.Ack.OK != o.cfg.Messages || inc.Checked != k {
				t.Errorf("%d keys: %d increments acked, %d counts checked; want %d and %d", k, inc.Ack.OK, inc.Checked, o.cfg.Messages, k)
			}
		}
		if sr.Restart.FirstRead <= 0 || sr.Restart.CrashRead <= 0 {
			t.Errorf("restart not measured: %+v", sr.Restart)
		}
	}
	if err := writeReport(o, res); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	if !strings.HasPrefix(s, "# Benchmarks\n\nThe other engineer's section.\n\n"+beginMarker) || !strings.HasSuffix(s, endMarker+"\n\n## After\n") {
		t.Errorf("the text around the markers changed:\n%s", s)
	}
	for _, want := range []string{"| 1. increment (ingress, durable ack) | 3 | ops/s |", "| 4. crash (SIGKILL) restart: start → first state read | 20 | s |", "![", "chart.png", "### Where our runtime's CPU goes"} {
		if !strings.Contains(s, want) {
			t.Errorf("the section lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "stale figures") {
		t.Error("the old section was not replaced")
	}
	f, err := os.Open(o.chart)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("chart: %v", err)
	}
}

func TestReplaceSection(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", beginMarker + "\nnew\n" + endMarker + "\n"},
		{"# B\n\ntext\n", "# B\n\ntext\n\n" + beginMarker + "\nnew\n" + endMarker + "\n"},
		{"a\n" + beginMarker + "\nold\n" + endMarker + "\nb\n", "a\n" + beginMarker + "\nnew\n" + endMarker + "\nb\n"},
	} {
		got, err := replaceSection([]byte(c.doc), "new\n")
		if err != nil || string(got) != c.want {
			t.Errorf("replaceSection(%q) = %q, %v; want %q", c.doc, got, err, c.want)
		}
	}
	for _, broken := range []string{"a\n" + beginMarker + "\n", endMarker + "\n" + beginMarker + "\n"} {
		if _, err := replaceSection([]byte(broken), "new\n"); err == nil {
			t.Errorf("replaceSection(%q) accepted broken markers", broken)
		}
	}
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(bytes.TrimSpace(b))
}
