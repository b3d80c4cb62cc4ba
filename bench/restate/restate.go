package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// restateVersion is the version of @restatedev/restate-server and
// @restatedev/restate that package.json pins.
const restateVersion = "1.7.12"

// restateBinaries finds the server and CLI binaries that the npm packages
// ship, under nodeModules: the platform packages
// @restatedev/restate-server-<os>-<arch> and @restatedev/restate-<os>-<arch>.
func restateBinaries(nodeModules string) (server, cli string, err error) {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	if arch == "" || (runtime.GOOS != "linux" && runtime.GOOS != "darwin") {
		return "", "", fmt.Errorf("bench: the Restate npm packages ship no binary for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	plat := runtime.GOOS + "-" + arch
	server = filepath.Join(nodeModules, "@restatedev", "restate-server-"+plat, "bin", "restate-server")
	cli = filepath.Join(nodeModules, "@restatedev", "restate-"+plat, "bin", "restate")
	for _, p := range []string{server, cli} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("bench: %s is missing: run `npm ci` in bench/restate (%w)", p, err)
		}
	}
	if server, err = filepath.Abs(server); err != nil {
		return "", "", err
	}
	cli, err = filepath.Abs(cli)
	return server, cli, err
}

// restateSystem is restate-server (single node, from the npm package,
// with its defaults) calling the Counter virtual object (Restate Go SDK
// v1.2.0, in a child process) that it discovered through POST
// /deployments.
type restateSystem struct {
	dir        string // work directory: restate.toml, base/ (the data), logs
	serverBin  string
	cliBin     string
	client     *http.Client
	fn         *proc
	fnURL      string
	srv        *proc
	ingress    string // http://127.0.0.1:port
	admin      string // http://127.0.0.1:port
	settings   []string
	registered bool
}

func newRestateSystem(dir, serverBin, cliBin string, clients int) *restateSystem {
	return &restateSystem{dir: dir, serverBin: serverBin, cliBin: cliBin, client: newClient(clients)}
}

func (r *restateSystem) Name() string       { return "Restate" }
func (r *restateSystem) DataDir() string    { return filepath.Join(r.dir, "base") }
func (r *restateSystem) Settings() []string { return r.settings }

func (r *restateSystem) Logs() []string {
	var out []string
	for _, p := range []*proc{r.srv, r.fn} {
		if p != nil {
			out = append(out, p.logPath)
		}
	}
	return out
}

func (r *restateSystem) PIDs() []int {
	var out []int
	for _, p := range []*proc{r.srv, r.fn} {
		if p != nil && p.alive() {
			out = append(out, p.pid())
		}
	}
	return out
}

func (r *restateSystem) Start(ctx context.Context) error {
	if r.fn == nil {
		if err := r.setup(); err != nil {
			return err
		}
	}
	var err error
	r.srv, err = startProc("restate-server", filepath.Join(r.dir, "restate-server.log"), r.serverBin,
		[]string{"--config-file", filepath.Join(r.dir, "restate.toml"), "--base-dir", r.DataDir(),
			"--no-logo", "--log-disable-ansi-codes", "true"},
		"DO_NOT_TRACK=true")
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, r.client, r.srv, r.admin+"/health", 2*time.Minute); err != nil {
		return err
	}
	if err := waitHTTP(ctx, r.client, r.srv, r.ingress+"/restate/health", 2*time.Minute); err != nil {
		return err
	}
	if !r.registered {
		if err := r.register(ctx); err != nil {
			return err
		}
		r.registered = true
	}
	return nil
}

// setup starts the counter and writes restate.toml, once. The
// configuration changes only where Restate listens (loopback TCP, free
// ports) and turns telemetry off; everything else, durability included,
// is the server's default.
func (r *restateSystem) setup() error {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	var err error
	r.fn, err = startRole("restate-counter", filepath.Join(r.dir, "counter.log"))
	if err != nil {
		return err
	}
	addr, err := r.fn.expect("listening on ", time.Minute)
	if err != nil {
		return err
	}
	r.fnURL = "http://" + addr
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	r.ingress = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	r.admin = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	config := fmt.Sprintf(`# Written by bench/restate: loopback TCP only, telemetry off; the rest is
# restate-server's default configuration.
node-name = "bench"
listen-mode = "tcp"
bind-ip = "127.0.0.1"
bind-port = %d
disable-telemetry = true

[ingress]
bind-port = %d

[admin]
bind-port = %d
`, ports[2], ports[0], ports[1])
	path := filepath.Join(r.dir, "restate.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	r.settings, err = r.describe(path)
	return err
}

// describe runs restate-server --dump-config and reports the settings
// that decide durability, as the server resolved them.
func (r *restateSystem) describe(config string) ([]string, error) {
	out, err := exec.Command(r.serverBin, "--config-file", config, "--dump-config").Output()
	if err != nil {
		return nil, fmt.Errorf("bench: restate-server --dump-config: %w", err)
	}
	want := []string{"default-num-partitions", "default-replication", "bifrost.default-provider",
		"log-server.rocksdb-disable-wal-fsync", "worker.storage.rocksdb-disable-wal", "default-journal-retention"}
	got := tomlValues(out)
	var kv []string
	for _, k := range want {
		if v, ok := got[k]; ok {
			kv = append(kv, fmt.Sprintf("`%s = %s`", k, v))
		}
	}
	version := "restate-server " + restateVersion
	if b, err := exec.Command(r.serverBin, "--version").Output(); err == nil {
		version = strings.TrimSpace(string(b))
	}
	return []string{
		fmt.Sprintf("`%s` (npm `@restatedev/restate-server@%s`), single node, defaults except loopback TCP listeners and telemetry off; durability-relevant defaults as the server resolves them: %s", version, restateVersion, strings.Join(kv, ", ")),
		"function: virtual object `Counter` (handler `add`), Restate Go SDK v1.2.0, HTTP/2 (h2c), own process, registered with `POST /deployments`",
	}, nil
}

// tomlValues flattens a TOML document into "section.key" → value for the
// simple key = value lines of --dump-config.
func tomlValues(doc []byte) map[string]string {
	out := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.Trim(line, "[]") + "."
			continue
		}
		k, v, ok := strings.Cut(line, " = ")
		if ok {
			out[section+k] = v
		}
	}
	return out
}

// register registers the counter's deployment (POST /deployments) and
// waits until the ingress routes to it.
func (r *restateSystem) register(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"uri": r.fnURL})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.admin+"/deployments", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	status, resp, err := do(r.client, req)
	if err == nil && status == http.StatusOK {
		status = http.StatusCreated
	}
	if err := expectStatus(req, status, resp, err, http.StatusCreated); err != nil {
		return err
	}
	// The ingress learns the new schema asynchronously.
	return pollUntil(ctx, 20*time.Millisecond, time.Minute, "Restate ingress routing to Counter", func() (bool, error) {
		_, err := r.call(ctx, "bench-warmup")
		return err == nil, nil
	})
}

// call invokes Counter/<key>/add with delta 1 and waits for the result
// (request-response).
func (r *restateSystem) call(ctx context.Context, key string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.ingress+"/"+restateService+"/"+key+"/"+restateHandler, strings.NewReader("1"))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	status, body, err := do(r.client, req)
	if err := expectStatus(req, status, body, err, http.StatusOK); err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
}

func (r *restateSystem) Stop() (time.Duration, error) {
	if r.srv == nil {
		return 0, nil
	}
	return r.srv.stop(2 * time.Minute)
}

func (r *restateSystem) Kill() {
	if r.srv != nil {
		r.srv.kill()
	}
}

func (r *restateSystem) Close() {
	r.Kill()
	if r.fn != nil {
		_, _ = r.fn.stop(10 * time.Second)
	}
	r.client.CloseIdleConnections()
}

// Increment sends Counter/<key>/add with delta 1 through the ingress's
// /send, which answers 202 once the invocation is durably in the log.
func (r *restateSystem) Increment(ctx context.Context, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.ingress+"/"+restateService+"/"+key+"/"+restateHandler+"/send", strings.NewReader("1"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	status, body, err := do(r.client, req)
	return expectStatus(req, status, body, err, http.StatusAccepted)
}

// query runs SQL on the admin API (POST /query) and returns its rows.
func (r *restateSystem) query(ctx context.Context, sql string) ([]map[string]any, error) {
	body, _ := json.Marshal(map[string]string{"query": sql})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.admin+"/query", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	status, resp, err := do(r.client, req)
	if err := expectStatus(req, status, resp, err, http.StatusOK); err != nil {
		return nil, err
	}
	var out struct {
		Rows []map[string]any `json:"rows"`
	}
	dec := json.NewDecoder(bytes.NewReader(resp))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("bench: POST /query %q: %w: %s", sql, err, resp)
	}
	return out.Rows, nil
}

// Applied is the sum of every Counter's count, from the state table.
func (r *restateSystem) Applied(ctx context.Context) (int64, error) {
	rows, err := r.query(ctx, fmt.Sprintf(
		"SELECT SUM(CAST(value_utf8 AS BIGINT)) AS total FROM state WHERE service_name = '%s' AND key = '%s'",
		restateService, restateState))
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 || rows[0]["total"] == nil {
		return 0, nil
	}
	return rowInt(rows[0]["total"])
}

// Read selects key's count from the state table through the admin API's
// SQL (what `restate kv get` does).
func (r *restateSystem) Read(ctx context.Context, key string) (int64, bool, error) {
	rows, err := r.query(ctx, fmt.Sprintf(
		"SELECT value_utf8 FROM state WHERE service_name = '%s' AND service_key = '%s' AND key = '%s'",
		restateService, sqlQuote(key), restateState))
	if err != nil || len(rows) == 0 {
		return 0, false, err
	}
	s, _ := rows[0]["value_utf8"].(string)
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("bench: Restate state of %s is %q, not a number", key, s)
	}
	return n, true, nil
}

// Write replaces key's state with POST /services/Counter/state (answered
// 202: the change is applied asynchronously), then reads until the new
// value is visible.
func (r *restateSystem) Write(ctx context.Context, key string, n int64) error {
	value := []byte(strconv.FormatInt(n, 10)) // JSON, as the SDK stores it
	body, _ := json.Marshal(map[string]any{"object_key": key, "new_state": map[string][]int{restateState: byteInts(value)}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.admin+"/services/"+restateService+"/state", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	status, resp, err := do(r.client, req)
	if err := expectStatus(req, status, resp, err, http.StatusAccepted); err != nil {
		return err
	}
	for {
		got, ok, err := r.Read(ctx, key)
		if err != nil && !errors.Is(err, errBusy) {
			return err
		}
		if ok && got == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(writePoll):
		}
	}
}

// writePoll is the pause between two reads while a Restate state write is
// not visible yet.
const writePoll = time.Millisecond

// cliGet runs `restate kv get Counter <key>` and returns its output.
func (r *restateSystem) cliGet(ctx context.Context, key string) (string, error) {
	cmd := exec.CommandContext(ctx, r.cliBin, "kv", "get", restateService, key, "--plain")
	cmd.Env = append(os.Environ(), "RESTATE_ADMIN_URL="+r.admin, "DO_NOT_TRACK=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("bench: restate kv get %s %s: %w: %s", restateService, key, err, out)
	}
	return string(out), nil
}

func byteInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func sqlQuote(s string) string { return strings.ReplaceAll(s, "'", "''") }

// rowInt reads an integer column of a JSON row (a number or a string).
func rowInt(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Int64()
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("bench: %v (%T) is not an integer", v, v)
}
