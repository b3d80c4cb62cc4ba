package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// statefunSystem is our runtime (in a child process, through internal/app
// as cmd/statefun runs it) calling sdktest/counter (official StateFun Go
// SDK v3.3.0, in another child process).
type statefunSystem struct {
	dir       string // work directory: module.yaml, data/, logs
	debug     bool   // serve the profile control routes
	client    *http.Client
	fn        *proc
	fnURL     string
	srv       *proc
	ingress   string // http://127.0.0.1:port/sdktest/counter/
	admin     string // http://127.0.0.1:port
	debugAddr string
}

func newStatefunSystem(dir string, clients int, debug bool) *statefunSystem {
	return &statefunSystem{dir: dir, debug: debug, client: newClient(clients)}
}

func (s *statefunSystem) Name() string    { return "statefun" }
func (s *statefunSystem) DataDir() string { return filepath.Join(s.dir, "data") }

func (s *statefunSystem) Settings() []string {
	return []string{
		"this repository's runtime through `internal/app.Start`, as `statefun run` starts it, with its defaults: GOGC 400, embedded Pebble store, 16 partitions, every group commit synced (`pebble.Sync`) before an ingress 200 or a state API `ack=committed` answer",
		"function: `sdktest/counter`, official StateFun Go SDK v3.3.0, HTTP/1.1, own process",
	}
}

func (s *statefunSystem) Logs() []string {
	var out []string
	for _, p := range []*proc{s.srv, s.fn} {
		if p != nil {
			out = append(out, p.logPath)
		}
	}
	return out
}

func (s *statefunSystem) PIDs() []int {
	var out []int
	for _, p := range []*proc{s.srv, s.fn} {
		if p != nil && p.alive() {
			out = append(out, p.pid())
		}
	}
	return out
}

func (s *statefunSystem) Start(ctx context.Context) error {
	if s.fn == nil {
		if err := s.setup(); err != nil {
			return err
		}
	}
	cfg, err := json.Marshal(runtimeConfig{Module: filepath.Join(s.dir, "module.yaml"), DataDir: s.DataDir(),
		AdminAddr: strings.TrimPrefix(s.admin, "http://"), DebugAddr: s.debugAddr})
	if err != nil {
		return err
	}
	s.srv, err = startRole("statefun-runtime", filepath.Join(s.dir, "runtime.log"), runtimeConfigEnv+"="+string(cfg))
	if err != nil {
		return err
	}
	return waitHTTP(ctx, s.client, s.srv, s.admin+"/readyz", 2*time.Minute)
}

// setup starts the counter and writes module.yaml, once.
func (s *statefunSystem) setup() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	var err error
	s.fn, err = startRole("statefun-counter", filepath.Join(s.dir, "counter.log"))
	if err != nil {
		return err
	}
	addr, err := s.fn.expect("listening on ", time.Minute)
	if err != nil {
		return err
	}
	s.fnURL = "http://" + addr + "/statefun"
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	s.ingress = fmt.Sprintf("http://127.0.0.1:%d/%s/", ports[0], sdktest.CounterFn)
	s.admin = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	if s.debug {
		s.debugAddr = fmt.Sprintf("127.0.0.1:%d", ports[3])
	}
	module := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.playground.v1/egress
spec:
  port: %d
  topics: [%s]
`, s.fnURL, ports[0], ports[1], sdktest.CounterTopic)
	return os.WriteFile(filepath.Join(s.dir, "module.yaml"), []byte(module), 0o644)
}

func (s *statefunSystem) Stop() (time.Duration, error) {
	if s.srv == nil {
		return 0, nil
	}
	return s.srv.stop(time.Minute)
}

func (s *statefunSystem) Kill() {
	if s.srv != nil {
		s.srv.kill()
	}
}

func (s *statefunSystem) Close() {
	s.Kill()
	if s.fn != nil {
		_, _ = s.fn.stop(10 * time.Second)
	}
	s.client.CloseIdleConnections()
}

// Increment posts "1" to the playground ingress, which answers 200 once
// the message is in a synced commit.
func (s *statefunSystem) Increment(ctx context.Context, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ingress+url.PathEscape(key), strings.NewReader("1"))
	if err != nil {
		return err
	}
	status, body, err := do(s.client, req)
	return expectStatus(req, status, body, err, http.StatusOK)
}

// Applied is the number of messages the function has answered, from the
// runtime's statefun_batch_size histogram (its sum).
func (s *statefunSystem) Applied(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	status, body, err := doAll(s.client, req)
	if err := expectStatus(req, status, body, err, http.StatusOK); err != nil {
		return 0, err
	}
	return int64(promSum(body, "statefun_batch_size_sum")), nil
}

func (s *statefunSystem) stateURL(key string) string {
	return s.admin + "/state/" + sdktest.CounterFn + "/" + url.PathEscape(key) + "/" + sdktest.CounterState
}

// Read is GET /state/sdktest/counter/<key>/count as text.
func (s *statefunSystem) Read(ctx context.Context, key string) (int64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.stateURL(key), nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "text/plain")
	status, body, err := do(s.client, req)
	if err == nil && status == http.StatusNotFound {
		return 0, false, nil
	}
	if err := expectStatus(req, status, body, err, http.StatusOK); err != nil {
		return 0, false, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("bench: GET %s: %q is not a number", req.URL, body)
	}
	return n, true, nil
}

// Write is PUT /state/sdktest/counter/<key>/count?ack=committed: it
// answers once the value is applied and its commit synced.
func (s *statefunSystem) Write(ctx context.Context, key string, n int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.stateURL(key)+"?ack=committed", strings.NewReader(strconv.FormatInt(n, 10)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain")
	status, body, err := do(s.client, req)
	if err == nil && status == http.StatusCreated {
		status = http.StatusOK
	}
	return expectStatus(req, status, body, err, http.StatusOK)
}

// profile starts (on) or stops a CPU profile of the runtime process.
func (s *statefunSystem) profile(ctx context.Context, on bool, file string) error {
	if s.debugAddr == "" {
		return nil
	}
	u := "http://" + s.debugAddr + "/profile/stop"
	if on {
		u = "http://" + s.debugAddr + "/profile/start?file=" + url.QueryEscape(file)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	status, body, err := do(s.client, req)
	return expectStatus(req, status, body, err, http.StatusOK)
}

// doAll is do without the 1 MiB cap on the body.
func doAll(client *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes(), err
}

// promSum adds up every series of a metric in a Prometheus text
// exposition.
func promSum(body []byte, name string) float64 {
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			total += v
		}
	}
	return total
}
