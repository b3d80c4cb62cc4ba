package e2e

// What a user sees when the input is wrong: a broken module.yaml, a bad
// command line, a malformed ingress request, a function that misbehaves.
// Every row asserts the message the user gets, because a clear error is the
// feature under test.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// badExit is how a statefun process that was expected to fail ended.
type badExit struct {
	code    int // -1 when it did not exit by itself within the timeout
	stderr  string
	elapsed time.Duration
}

// badRunBinary runs the statefun binary in dir with args and env added to
// the environment, and waits at most 15 s for it to exit.
func badRunBinary(t *testing.T, dir string, env []string, args ...string) badExit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1"), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	start := time.Now()
	err := cmd.Run()
	ex := badExit{stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		ex.code = -1
	case err == nil:
		ex.code = 0
	case errors.As(err, &ee):
		ex.code = ee.ExitCode()
	default:
		t.Fatalf("running statefun: %v", err)
	}
	return ex
}

// checkBadExit asserts that the process failed quickly (with code want, or
// any non-zero code when want is 0), printed every fragment, and did not
// crash with a Go panic.
func checkBadExit(t *testing.T, ex badExit, want int, fragments ...string) {
	t.Helper()
	switch {
	case ex.code == -1:
		t.Fatalf("statefun still running after 15s; want a quick exit. Output:\n%s", ex.stderr)
	case ex.code == 0:
		t.Errorf("exit code 0; want a failure. Output:\n%s", ex.stderr)
	case want != 0 && ex.code != want:
		t.Errorf("exit code %d; want %d", ex.code, want)
	}
	if ex.elapsed > 5*time.Second {
		t.Errorf("took %v to fail; want a quick exit", ex.elapsed.Round(time.Millisecond))
	}
	for _, f := range fragments {
		if !strings.Contains(ex.stderr, f) {
			t.Errorf("output lacks %q. Output:\n%s", f, ex.stderr)
		}
	}
	for _, bad := range []string{"panic:", "goroutine ", "statefun running"} {
		if strings.Contains(ex.stderr, bad) {
			t.Errorf("output has %q. Output:\n%s", bad, ex.stderr)
		}
	}
}

// badIngressDoc is a valid first document, so that the broken one is
// document 2 and starts on line 5.
func badIngressDoc(port int) string {
	return fmt.Sprintf("kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", port)
}

// TestBadModule feeds malformed module.yamls to `statefun run`: each must
// stop the process at once with the file, line, column, document and field
// of the problem.
func TestBadModule(t *testing.T) {
	const endpointV2 = "document 2 (io.statefun.endpoints.v2/http)"
	rows := []struct {
		name string
		// module returns the file contents for a free port; nil means no
		// module file is written.
		module func(port int) string
		file   string // default module.yaml
		want   []string
	}{
		{
			name: "missing kind",
			module: func(p int) string {
				return badIngressDoc(p) + "spec:\n  functions: a/*\n  urlPathTemplate: http://localhost:8000/statefun\n"
			},
			want: []string{"statefun: module.yaml:5:1: document 2: kind: required"},
		},
		{
			name: "unknown kind",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v3/http\nspec:\n  functions: a/*\n"
			},
			want: []string{`module.yaml:5:7: document 2 (io.statefun.endpoints.v3/http): kind: unknown kind "io.statefun.endpoints.v3/http"; supported kinds: io.statefun.endpoints.v2/http, io.statefun.endpoints.v1/http, io.statefun.playground.v1/ingress, io.statefun.playground.v1/egress`},
		},
		{
			name: "kafka ingress to a function type no endpoint serves",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.kafka.v1/ingress\nspec:\n  id: a/in\n  address: kafka:9092\n  consumerGroupId: g\n  topics:\n    - topic: names\n      valueType: io.statefun.types/string\n      targets: [a/b]\n"
			},
			want: []string{"module.yaml:11:7: document 2 (io.statefun.kafka.v1/ingress): targets: topic names routes to a/b, which no endpoint of the module serves"},
		},
		{
			name: "wildcard in the namespace",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a*/b\n  urlPathTemplate: http://localhost:8000/statefun\n"
			},
			want: []string{`module.yaml:7:14: ` + endpointV2 + `: spec.functions: invalid function type "a*/b": a wildcard may only stand for the whole name; want <namespace>/<name> or <namespace>/*`},
		},
		{
			name: "missing urlPathTemplate",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n"
			},
			want: []string{"module.yaml:6:1: " + endpointV2 + ": spec.urlPathTemplate: required"},
		},
		{
			name: "relative urlPathTemplate",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n  urlPathTemplate: /statefun\n"
			},
			want: []string{`module.yaml:8:20: ` + endpointV2 + `: spec.urlPathTemplate: invalid URL template "/statefun": want an absolute URL, such as http://functions:8000/statefun`},
		},
		{
			name: "bad duration in transport.call",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n  urlPathTemplate: http://localhost:8000/statefun\n  transport:\n    type: io.statefun.transports.v1/async\n    call: 5 parsecs\n"
			},
			want: []string{`module.yaml:11:11: ` + endpointV2 + `: spec.transport.call: invalid duration "5 parsecs": unknown unit "parsecs"; known units: d, day(s), h, hour(s), m, min`},
		},
		{
			name: "unknown transport type",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n  urlPathTemplate: http://localhost:8000/statefun\n  transport:\n    type: io.statefun.transports.v1/grpc\n"
			},
			want: []string{`module.yaml:10:11: ` + endpointV2 + `: spec.transport.type: unknown transport type "io.statefun.transports.v1/grpc"; want io.statefun.transports.v1/async (the default) or io.statefun.transports.v1/okhttp`},
		},
		{
			name: "maxNumBatchRequests of the wrong type",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n  urlPathTemplate: http://localhost:8000/statefun\n  maxNumBatchRequests: many\n"
			},
			want: []string{`module.yaml:9:24: ` + endpointV2 + `: spec.maxNumBatchRequests: want an integer, got string "many"`},
		},
		{
			name: "function type bound twice",
			module: func(p int) string {
				ep := "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n  urlPathTemplate: http://localhost:8000/statefun\n"
				return badIngressDoc(p) + ep + "---\n" + ep
			},
			want: []string{"module.yaml:12:14: document 3 (io.statefun.endpoints.v2/http): spec.functions: a/* is already bound by document 2 (module.yaml:7:14)"},
		},
		{
			name: "invalid YAML: unclosed flow sequence",
			module: func(p int) string {
				return badIngressDoc(p) + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: [a/*\n  urlPathTemplate: http://localhost:8000/statefun\n"
			},
			want: []string{"module.yaml:7: document 2: invalid YAML: did not find expected ',' or ']'"},
		},
		{
			name: "invalid YAML: tab indentation",
			module: func(p int) string {
				return fmt.Sprintf("kind: io.statefun.playground.v1/ingress\nspec:\n\tport: %d\n", p)
			},
			want: []string{"module.yaml:3: document 1: invalid YAML: found character that cannot start any token"},
		},
		{
			name: "playground ingress port out of range",
			module: func(int) string {
				return "kind: io.statefun.playground.v1/ingress\nspec:\n  port: 70000\n"
			},
			want: []string{"module.yaml:3:9: document 1 (io.statefun.playground.v1/ingress): spec.port: 70000 is out of range; want 1 to 65535"},
		},
		{
			name: "egress without topics",
			module: func(p int) string {
				return badIngressDoc(p) + fmt.Sprintf("kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n", p+1)
			},
			want: []string{"module.yaml:6:1: document 2 (io.statefun.playground.v1/egress): spec.topics: required"},
		},
		{
			name: "legacy version 2.0",
			module: func(int) string {
				return "version: \"2.0\"\nmodule:\n  meta:\n    type: remote\n  spec:\n    endpoints: []\n"
			},
			want: []string{`module.yaml:1:10: document 1: version: format version 2.0 is no longer supported; use "3.0", or better one kind/spec document per component`},
		},
		{
			name: "every problem of a file is reported",
			module: func(int) string {
				return "kind: io.statefun.playground.v1/ingress\nspec:\n  port: 0\n---\nkind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n"
			},
			want: []string{
				"module.yaml:3:9: document 1 (io.statefun.playground.v1/ingress): spec.port: 0 is out of range",
				"\nmodule.yaml:6:1: " + endpointV2 + ": spec.urlPathTemplate: required",
			},
		},
		{
			name: "nonexistent module file",
			file: "missing.yaml",
			want: []string{"statefun: module: reading module file: open missing.yaml: no such file or directory"},
		},
		{
			name:   "module path is a directory",
			file:   "conf",
			module: nil,
			want:   []string{"statefun: module: reading module file: read conf: is a directory"},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := row.file
			if file == "" {
				file = "module.yaml"
			}
			switch {
			case row.module != nil:
				if err := os.WriteFile(filepath.Join(dir, file), []byte(row.module(freePort(t))), 0o644); err != nil {
					t.Fatal(err)
				}
			case file == "conf":
				if err := os.Mkdir(filepath.Join(dir, file), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			ex := badRunBinary(t, dir, nil, "run", "--module", file, "--data-dir", "data", "--admin-addr", "127.0.0.1:0")
			checkBadExit(t, ex, 1, row.want...)
			if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
				t.Errorf("a store was created in %s for an invalid module", filepath.Join(dir, "data"))
			}
		})
	}
}

// TestBadCommandLine runs statefun with bad arguments and environments.
func TestBadCommandLine(t *testing.T) {
	rows := []struct {
		name string
		// args returns the command line, after setting up dir, which holds a
		// valid module.yaml.
		args func(t *testing.T, dir string) []string
		env  []string
		code int // 0: any non-zero code
		want []string
	}{
		{
			name: "no subcommand",
			args: func(*testing.T, string) []string { return nil },
			code: 2,
			want: []string{"Usage:", "statefun run --module FILE"},
		},
		{
			name: "unknown subcommand",
			args: func(*testing.T, string) []string { return []string{"frobnicate"} },
			code: 2,
			want: []string{`statefun: unknown command "frobnicate"`, "Usage:"},
		},
		{
			name: "unknown flag",
			args: func(*testing.T, string) []string {
				return []string{"run", "--module", "module.yaml", "--frob", "--data-dir", "data"}
			},
			code: 2,
			want: []string{"statefun run: unknown flag: --frob", "Usage: statefun run", `"statefun run --help"`},
		},
		{
			name: "stray argument",
			args: func(*testing.T, string) []string {
				return []string{"run", "--module", "module.yaml", "--data-dir", "data", "extra"}
			},
			code: 2,
			want: []string{`statefun run: unexpected argument "extra"`},
		},
		{
			name: "unknown log level",
			args: func(*testing.T, string) []string {
				return []string{"run", "--module", "module.yaml", "--data-dir", "data", "--log-level", "loud"}
			},
			code: 2,
			want: []string{`statefun run: --log-level "loud": want debug, info, warn or error`},
		},
		{
			name: "STATEFUN_PARTITIONS not a number",
			args: func(*testing.T, string) []string {
				return []string{"run", "--module", "module.yaml", "--data-dir", "data"}
			},
			env:  []string{"STATEFUN_PARTITIONS=many"},
			code: 2,
			want: []string{`statefun run: STATEFUN_PARTITIONS="many" is not a number`},
		},
		{
			name: "data dir is a regular file",
			args: func(t *testing.T, dir string) []string {
				if err := os.WriteFile(filepath.Join(dir, "afile"), []byte("not a store"), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"run", "--module", "module.yaml", "--data-dir", "afile", "--admin-addr", "127.0.0.1:0"}
			},
			code: 1,
			want: []string{`statefun: store: data directory afile: `, "afile: not a directory"},
		},
		{
			name: "no module flag and no module.yaml in the working directory",
			args: func(t *testing.T, dir string) []string {
				if err := os.Remove(filepath.Join(dir, "module.yaml")); err != nil {
					t.Fatal(err)
				}
				return []string{"run", "--data-dir", "data", "--admin-addr", "127.0.0.1:0"}
			},
			code: 1,
			want: []string{"statefun: module: reading module file: open module.yaml: no such file or directory"},
		},
		{
			name: "negative partitions",
			args: func(*testing.T, string) []string {
				return []string{"run", "--module", "module.yaml", "--data-dir", "data", "--admin-addr", "127.0.0.1:0", "--partitions", "-3"}
			},
			code: 2,
			want: []string{"--partitions -3", "want 0 (adopt the store's) or 1 to 65536"},
		},
		{
			name: "partition count differs from the store's",
			args: func(t *testing.T, dir string) []string {
				r := newRuntimeWith(t, func(in, _ int) string { return badIngressDoc(in) })
				r.start() // --partitions 8
				if err := r.stop(); err != nil {
					t.Fatal(err)
				}
				return []string{"run", "--module", "module.yaml", "--data-dir", filepath.Join(r.dir, "data"), "--admin-addr", "127.0.0.1:0", "--partitions", "4"}
			},
			code: 1,
			want: []string{"statefun: store: partition count differs from the store's: ", "was created with 8 partitions, but 4 are configured; the partition count cannot change"},
		},
		{
			name: "admin address malformed",
			args: func(*testing.T, string) []string {
				return []string{"run", "--module", "module.yaml", "--data-dir", "data", "--admin-addr", "nonsense"}
			},
			code: 1,
			want: []string{"statefun: app: admin listener address \"nonsense\": address nonsense: missing port in address"},
		},
		{
			name: "admin address in use",
			args: func(t *testing.T, dir string) []string {
				ln := badListen(t, "127.0.0.1:0")
				return []string{"run", "--module", "module.yaml", "--data-dir", "data", "--admin-addr", ln.Addr().String()}
			},
			code: 1,
			want: []string{"statefun: app: admin listener: listen tcp 127.0.0.1:", "bind: address already in use"},
		},
		{
			name: "ingress port in use",
			args: func(t *testing.T, dir string) []string {
				ln := badListen(t, "127.0.0.1:0")
				port := ln.Addr().(*net.TCPAddr).Port
				if err := os.WriteFile(filepath.Join(dir, "module.yaml"), []byte(badIngressDoc(port)), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"run", "--module", "module.yaml", "--data-dir", "data", "--admin-addr", "127.0.0.1:0"}
			},
			code: 1,
			want: []string{"ingress", "listen tcp 127.0.0.1:", "bind: address already in use"},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "module.yaml"), []byte(badIngressDoc(freePort(t))), 0o644); err != nil {
				t.Fatal(err)
			}
			args := row.args(t, dir)
			ex := badRunBinary(t, dir, row.env, args...)
			checkBadExit(t, ex, row.code, row.want...)
		})
	}
}

// badListen holds a listener on addr until the test ends.
func badListen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

var badCount = statefun.ValueSpec{Name: "count", ValueType: statefun.Int64Type}

// badSDKHandler serves every function type in types with the official Go
// SDK: each message adds one to the state count and sends the playground
// egress record "<namespace>/<name>:<id>:<count>" to topic "good" for the
// namespace good, and to topic "fixed" otherwise.
func badSDKHandler(t testing.TB, types ...string) http.Handler {
	b := statefun.StatefulFunctionsBuilder()
	fn := statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
		var n int64
		ctx.Storage().Get(badCount, &n)
		n++
		ctx.Storage().Set(badCount, n)
		self := ctx.Self()
		topic := "fixed"
		if self.FunctionType.GetNamespace() == "good" {
			topic = "good"
		}
		ctx.SendEgress(statefun.GenericEgressBuilder{
			Target:    statefun.TypeNameFrom("io.statefun.playground/egress"),
			Value:     egressRecord{Topic: topic, Payload: fmt.Sprintf("%s:%s:%d", self.FunctionType, self.Id, n)},
			ValueType: recordType,
		})
		return nil
	})
	for _, typ := range types {
		err := b.WithSpec(statefun.StatefulFunctionSpec{
			FunctionType: statefun.TypeNameFrom(typ),
			States:       []statefun.ValueSpec{badCount},
			Function:     fn,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.AsHandler()
}

// badRawRequest sends one HTTP/1.1 request with exactly this request
// target (which net/http's client would refuse or re-encode), a body of
// size bytes, and returns the status and the response body.
func badRawRequest(t *testing.T, base, target, contentType string, size int64) (int, string) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", target, host, size)
	if contentType != "" {
		head += "Content-Type: " + contentType + "\r\n"
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		// The server may answer and close before it read all: ignore
		// write errors, the status is what counts.
		if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
			return
		}
		io.Copy(conn, io.LimitReader(badFiller{}, size))
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("PUT %s: %v", target, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	conn.Close()
	<-written
	return resp.StatusCode, string(body)
}

// badFiller is an endless stream of 'x' bytes that allocates nothing.
type badFiller struct{}

func (badFiller) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestBadIngressRequest sends malformed requests to the playground ingress:
// each is refused with a status and a reason, and neither they nor their
// refusal disturb the messages accepted before and after.
func TestBadIngressRequest(t *testing.T) {
	fn := httptest.NewServer(badSDKHandler(t, "good/counter"))
	t.Cleanup(fn.Close)
	r := newRuntime(t, fn.URL, []string{"good"}, []string{"good"})
	r.start()

	if status, err := r.send("/good/counter/before", "good/inc", "{}"); err != nil || status != 200 {
		t.Fatalf("valid message before: status %d, %v", status, err)
	}
	const pathShape = "the path must be /<namespace>/<function-name>/<id>"
	rows := []struct {
		name        string
		target      string
		contentType string
		size        int64
		status      int
		want        []string
	}{
		{"too few segments", "/good/counter", "application/vnd.good/inc", 2, 400, []string{pathShape, `got "/good/counter"`}},
		{"too many segments", "/good/counter/a/b", "application/vnd.good/inc", 2, 400, []string{pathShape, `got "/good/counter/a/b"`}},
		{"empty segment", "/good//a", "application/vnd.good/inc", 2, 400, []string{pathShape + ": empty function name"}},
		{"empty id", "/good/counter/", "application/vnd.good/inc", 2, 400, []string{pathShape + ": empty id"}},
		// Go's HTTP server refuses this request line before any handler
		// sees it, with a bare "400 Bad Request" (docs/reference/state-api.md).
		{"invalid percent-encoding", "/good/counter/%zz", "application/vnd.good/inc", 2, 400, []string{"400 Bad Request"}},
		{"id not UTF-8", "/good/counter/%ff", "application/vnd.good/inc", 2, 400, []string{"ingress: id is not valid UTF-8"}},
		// "." and ".." sent percent-encoded: ids and types no URL can
		// carry (clients resolve them away), so never readable after.
		{"id %2E", "/good/counter/%2E", "application/vnd.good/inc", 2, 400, []string{`ingress: id "." is a dot segment`}},
		{"function name %2E%2E", "/good/%2E%2E/a", "application/vnd.good/inc", 2, 400, []string{`ingress: function name ".." is a dot segment`}},
		{"Content-Type without a slash", "/good/counter/a", "application/vnd.nonamespace", 2, 400, []string{`ingress: Content-Type "application/vnd.nonamespace" does not name a typename <namespace>/<name>`}},
		{"Content-Type with an empty name", "/good/counter/a", "application/vnd.good/", 2, 400, []string{`ingress: Content-Type "application/vnd.good/" does not name a typename <namespace>/<name>`}},
		{"body over 32 MiB", "/good/counter/big", "application/vnd.good/inc", 32<<20 + 1, 413, []string{"ingress: body over 33550336 bytes", "what the function's endpoint can carry"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			status, body := badRawRequest(t, r.ingress, row.target, row.contentType, row.size)
			if status != row.status {
				t.Errorf("PUT %s: status %d; want %d (body %q)", row.target, status, row.status, body)
			}
			for _, f := range row.want {
				if !strings.Contains(body, f) {
					t.Errorf("PUT %s: body %q lacks %q", row.target, body, f)
				}
			}
		})
	}

	if status, err := r.send("/good/counter/after", "good/inc", "{}"); err != nil || status != 200 {
		t.Fatalf("valid message after: status %d, %v", status, err)
	}
	got := r.collect("good", 2, 10*time.Second)
	slices.Sort(got)
	if want := []string{"good/counter:after:1", "good/counter:before:1"}; !slices.Equal(got, want) {
		t.Errorf("egress records %q; want %q (a refused request must deliver nothing, and an accepted one must not be lost)", got, want)
	}
	if p, ok, _ := r.pop("good"); ok {
		t.Errorf("unexpected extra egress record %q", p)
	}
}

// badDouble is a test double of a broken function: it misbehaves with
// broken until fixed is set, and from then on is the official-SDK function.
type badDouble struct {
	fixed   atomic.Bool
	calls   atomic.Int64 // calls while broken
	broken  http.HandlerFunc
	healthy http.Handler
}

func (d *badDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.fixed.Load() {
		d.healthy.ServeHTTP(w, r)
		return
	}
	d.calls.Add(1)
	io.Copy(io.Discard, r.Body)
	d.broken(w, r)
}

// badAnswer writes a FromFunction carrying the invocation result res.
func badAnswer(res *protocol.FromFunction_InvocationResponse) http.HandlerFunc {
	body, err := proto.Marshal(&protocol.FromFunction{
		Response: &protocol.FromFunction_InvocationResult{InvocationResult: res},
	})
	if err != nil {
		panic(err)
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	}
}

// badPlaygroundRecord is a valid playground egress message to topic.
func badPlaygroundRecord(topic, payload string) *protocol.FromFunction_EgressMessage {
	return &protocol.FromFunction_EgressMessage{
		EgressNamespace: "io.statefun.playground",
		EgressType:      "egress",
		Argument: &protocol.TypedValue{
			Typename: "io.statefun.playground/EgressRecord",
			HasValue: true,
			Value:    fmt.Appendf(nil, `{"topic":%q,"payload":%q}`, topic, payload),
		},
	}
}

// badFullLog is the whole log of r (logs keeps only the tail).
func badFullLog(r *runtime) string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.log.String()
}

// badLogLine returns the first line of log that has every fragment.
func badLogLine(log string, fragments []string) (string, bool) {
	for line := range strings.SplitSeq(log, "\n") {
		ok := true
		for _, f := range fragments {
			if !strings.Contains(line, f) {
				ok = false
				break
			}
		}
		if ok {
			return line, true
		}
	}
	return "", false
}

// TestBadFunction runs one runtime against function doubles that fail in
// every way a remote function can, next to a healthy official-SDK
// function. Each broken address must be logged with its function type, id
// and reason and retried, while the healthy function keeps working; once
// the double is fixed, every message waiting for it is delivered, once.
func TestBadFunction(t *testing.T) {
	sdk := badSDKHandler(t, "good/counter", "ghost/fn",
		"bad/down", "bad/status500", "bad/status404", "bad/textplain", "bad/garbage", "bad/empty", "bad/slow",
		"bad/unregistered", "bad/unknownegress", "bad/undeclaredtopic")
	good := httptest.NewServer(sdk)
	t.Cleanup(good.Close)

	octet := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			io.WriteString(w, body)
		}
	}
	rows := []struct {
		name   string
		broken http.HandlerFunc // nil: nothing listens (connection refused)
		want   []string         // fragments of the log line, besides function, id and protocol_violation
		viol   bool
	}{
		{name: "down", want: []string{"cannot connect", "connection refused"}},
		{name: "status500", broken: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "boom: the function crashed", http.StatusInternalServerError)
		}, want: []string{"function answered 500 Internal Server Error", "boom: the function crashed"}},
		{name: "status404", broken: http.NotFound, want: []string{"function answered 404 Not Found", "404 page not found"}},
		{name: "textplain", broken: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, "hello")
		}, want: []string{`function answered Content-Type \"text/plain; charset=utf-8\", want application/octet-stream`}},
		{name: "garbage", viol: true, broken: octet("\xff\xff\xff"), want: []string{"the 3-byte response is not a FromFunction"}},
		{name: "empty", broken: octet(""), want: []string{"function answered 200 OK with an empty body"}},
		{name: "slow", broken: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, want: []string{"no answer within the call timeout of 500ms"}},
		{name: "unregistered", viol: true, broken: badAnswer(&protocol.FromFunction_InvocationResponse{
			StateMutations: []*protocol.FromFunction_PersistedValueMutation{{
				MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY,
				StateName:    "ghost",
				StateValue:   &protocol.TypedValue{Typename: "io.statefun.types/long", HasValue: true, Value: []byte{8, 1}},
			}},
			// A valid effect in the same response: refused with the rest.
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{badPlaygroundRecord("fixed", "leak")},
		}), want: []string{`protocol violation: state mutation 0: state \"ghost\" is not registered for bad/unregistered`}},
		{name: "unknownegress", viol: true, broken: badAnswer(&protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{
				badPlaygroundRecord("fixed", "leak"),
				{EgressNamespace: "nowhere", EgressType: "egress", Argument: &protocol.TypedValue{Typename: "a/b", HasValue: true}},
			},
		}), want: []string{"protocol violation: egress message 1 to nowhere/egress: unknown egress nowhere/egress"}},
		{name: "undeclaredtopic", viol: true, broken: badAnswer(&protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{badPlaygroundRecord("undeclared", "leak")},
		}), want: []string{`topic \"undeclared\" is not one of the egress's topics`}},
	}

	doubles := make([]*badDouble, len(rows))
	urls := make([]string, len(rows))
	var downAddr string
	for i, row := range rows {
		if row.broken == nil {
			downAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
			urls[i] = "http://" + downAddr + "/statefun"
			continue
		}
		doubles[i] = &badDouble{broken: row.broken, healthy: sdk}
		srv := httptest.NewServer(doubles[i])
		t.Cleanup(srv.Close)
		urls[i] = srv.URL + "/statefun"
	}
	module := func(in, out int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: good/*\n  urlPathTemplate: %s\n---\n", good.URL)
		for i, row := range rows {
			fmt.Fprintf(&b, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: bad/%s\n  urlPathTemplate: %s\n  transport:\n    call: 500ms\n---\n", row.name, urls[i])
		}
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", in)
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n  topics: [good, fixed]\n", out)
		return b.String()
	}
	r := newRuntimeWith(t, module)
	r.start()
	brokenSince := time.Now()

	// Two messages for every broken address: the second waits behind the
	// first. ghost/fn has no endpoint in module.yaml at all: the ingress
	// refuses its messages (404) instead of storing what nothing can serve.
	send := func(path string) {
		t.Helper()
		if status, err := r.send(path, "bad/msg", "{}"); err != nil || status != 200 {
			t.Fatalf("PUT %s: status %d, %v", path, status, err)
		}
	}
	for range 2 {
		for _, row := range rows {
			send("/bad/" + row.name + "/stuck")
		}
		if status, err := r.send("/ghost/fn/stuck", "bad/msg", "{}"); err != nil || status != http.StatusNotFound {
			t.Fatalf("PUT /ghost/fn/stuck: status %d, %v; want 404: no endpoint serves ghost/fn", status, err)
		}
	}

	// The healthy function keeps working meanwhile, on every partition.
	var wantGood []string
	for n := 1; n <= 2; n++ {
		for i := range 10 {
			send(fmt.Sprintf("/good/counter/g%d", i))
			wantGood = append(wantGood, fmt.Sprintf("good/counter:g%d:%d", i, n))
		}
	}
	gotGood := r.collect("good", len(wantGood), 10*time.Second)
	slices.Sort(gotGood)
	slices.Sort(wantGood)
	if !slices.Equal(gotGood, wantGood) {
		t.Errorf("while functions were failing, the healthy function delivered %q; want %q", gotGood, wantGood)
	}

	// Each failure is logged with function type, id and reason, and retried.
	type check struct {
		what  string
		frags []string
	}
	var checks []check
	for _, row := range rows {
		frags := append([]string{
			`msg="invocation failed, will retry"`, "function=bad/" + row.name + " ", "id=stuck ",
			fmt.Sprintf("protocol_violation=%t", row.viol), "retry_in=",
		}, row.want...)
		checks = append(checks, check{"bad/" + row.name, frags})
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range checks {
		for {
			if line, ok := badLogLine(badFullLog(r), c.frags); ok {
				_, reason, _ := strings.Cut(line, " error=")
				t.Logf("%s: %s", c.what, reason)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: no log line with all of %q", c.what, c.frags)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i, row := range rows {
		if doubles[i] == nil {
			continue
		}
		for doubles[i].calls.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := doubles[i].calls.Load(); n < 2 {
			t.Errorf("bad/%s was called %d times while broken; want retries", row.name, n)
		}
	}
	if line, ok := badLogLine(badFullLog(r), []string{"attempt=2", "function=bad/status500"}); !ok {
		t.Errorf("no log line for the second attempt of bad/status500")
	} else {
		t.Logf("a failure as logged: %s", line)
	}
	if p, ok, _ := r.pop("fixed"); ok {
		t.Errorf("a broken function delivered %q", p)
	}
	select {
	case <-r.exited:
		t.Fatalf("statefun exited while functions were failing:\n%s", r.logs())
	default:
	}
	if resp, err := http.Get("http://" + r.admin + "/readyz"); err != nil {
		t.Errorf("readyz: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("readyz: %s while functions were failing; want 200", resp.Status)
		}
	}
	// Keep the broken phase about 1 s: the backoff (50 ms doubling) then
	// retries within a couple of seconds of the fix.
	if d := time.Second - time.Since(brokenSince); d > 0 {
		time.Sleep(d)
	}

	// Fix every function: the stuck messages come through, in order, once.
	for _, d := range doubles {
		if d != nil {
			d.fixed.Store(true)
		}
	}
	ln, err := net.Listen("tcp", downAddr)
	if err != nil {
		t.Fatalf("bringing bad/down up on %s: %v", downAddr, err)
	}
	up := &http.Server{Handler: sdk}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	fixedAt := time.Now()

	var wantFixed []string
	for _, row := range rows {
		wantFixed = append(wantFixed, "bad/"+row.name+":stuck:1", "bad/"+row.name+":stuck:2")
	}
	gotFixed := r.collect("fixed", len(wantFixed), 20*time.Second)
	t.Logf("stuck messages delivered %v after the fix", time.Since(fixedAt).Round(time.Millisecond))
	slices.Sort(gotFixed)
	slices.Sort(wantFixed)
	if !slices.Equal(gotFixed, wantFixed) {
		t.Errorf("after the fix, delivered %q; want %q (nothing lost, nothing twice, no effect of a refused response)", gotFixed, wantFixed)
	}

	time.Sleep(200 * time.Millisecond)
	for _, topic := range []string{"fixed", "good"} {
		if p, ok, _ := r.pop(topic); ok {
			t.Errorf("unexpected extra record on %s: %q", topic, p)
		}
	}
}
