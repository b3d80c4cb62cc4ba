package app

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"

	"github.com/statefun-go/statefun/internal/testport"
)

var (
	recordType = statefun.MakeJsonType(statefun.TypeNameFrom("io.statefun.playground/EgressRecord"))
	countSpec  = statefun.ValueSpec{Name: "count", ValueType: statefun.Int32Type}
)

type egressRecord struct {
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
}

// counterFunctions is an official-SDK function server: test/counter counts
// its messages and reports each count on the "out" topic.
func counterFunctions(t *testing.T) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("test/counter"),
		States:       []statefun.ValueSpec{countSpec},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int32
			ctx.Storage().Get(countSpec, &n)
			n++
			ctx.Storage().Set(countSpec, n)
			ctx.SendEgress(statefun.GenericEgressBuilder{
				Target:    statefun.TypeNameFrom("io.statefun.playground/egress"),
				Value:     egressRecord{Topic: "out", Payload: fmt.Sprintf("%s=%d", ctx.Self().Id, n)},
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

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testport.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startApp(t *testing.T, dir, fnURL string) (*App, string, string) {
	return startAppWith(t, dir, fnURL, nil)
}

// startAppWith is startApp with the Config changed by change (when not nil).
func startAppWith(t *testing.T, dir, fnURL string, change func(*Config)) (*App, string, string) {
	in, out := freePort(t), freePort(t)
	mod := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: test/*
  urlPathTemplate: %s/statefun
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.playground.v1/egress
spec:
  port: %d
  topics: [out]
`, fnURL, in, out)
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ModulePath: path, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Partitions: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if change != nil {
		change(&cfg)
	}
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, fmt.Sprintf("http://127.0.0.1:%d", in), fmt.Sprintf("http://127.0.0.1:%d", out)
}

func send(t *testing.T, ingress, path, body string) {
	req, _ := http.NewRequest(http.MethodPut, ingress+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.test/ping")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ingress answered %s", resp.Status)
	}
}

// poll pops egress records until n have arrived or the deadline passes.
func poll(t *testing.T, egress string, n int) []string {
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		resp, err := http.Get(egress + "/out")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			got = append(got, string(b))
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
	return got
}

func TestCounterThroughIngressAndEgressSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	fn := counterFunctions(t)
	a, in, out := startApp(t, dir, fn)
	for i := 0; i < 3; i++ {
		send(t, in, "/test/counter/alice", "x")
	}
	send(t, in, "/test/counter/b%2Fob", "x") // an id with a '/'
	got := poll(t, out, 4)
	want := map[string]bool{"alice=1": true, "alice=2": true, "alice=3": true, "b/ob=1": true}
	for _, g := range got {
		delete(want, g)
	}
	if len(want) != 0 {
		t.Fatalf("egress records %v, missing %v", got, want)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a, in, out = startApp(t, dir, fn)
	defer a.Close()
	send(t, in, "/test/counter/alice", "x")
	if got := poll(t, out, 1); len(got) != 1 || got[0] != "alice=4" {
		t.Fatalf("after restart: %v, want alice=4", got)
	}
}
