package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runtime is one statefun process with its module and data directory.
type runtime struct {
	t       testing.TB
	dir     string
	module  string
	ingress string // base URL
	egress  string
	admin   string
	cmd     *exec.Cmd
	// wrap, when set, runs the binary through this command (for example
	// prlimit with its options), which must exec it in the same process.
	wrap   []string
	logMu  sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	killMu sync.Mutex // serializes kill
	// cluster is set for a cluster node (newRuntimeOn).
	cluster *clusterSide
}

// newRuntime writes a module.yaml binding every function namespace in
// namespaces to fnURL, with a playground ingress and an egress of topics.
func newRuntime(t testing.TB, fnURL string, namespaces []string, topics []string) *runtime {
	return newRuntimeWith(t, playgroundModule(fnURL, namespaces, topics))
}

// playgroundModule is the module of newRuntime, for newRuntimeWith and
// newRuntimeOn.
func playgroundModule(fnURL string, namespaces []string, topics []string) func(ingressPort, egressPort int) string {
	return func(ingressPort, egressPort int) string {
		var mod strings.Builder
		for _, ns := range namespaces {
			fmt.Fprintf(&mod, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: %s/*\n  urlPathTemplate: %s\n  transport:\n    type: io.statefun.transports.v1/async\n    call: 5s\n---\n", ns, fnURL)
		}
		fmt.Fprintf(&mod, "kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", ingressPort)
		fmt.Fprintf(&mod, "kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n  topics: [%s]\n", egressPort, strings.Join(topics, ", "))
		return mod.String()
	}
}

// newRuntimeWith writes the module.yaml that module returns for the free
// ports it is given (the ingress and egress ports of the playground kinds).
// The process is not started; call start.
func newRuntimeWith(t testing.TB, module func(ingressPort, egressPort int) string) *runtime {
	dir := t.TempDir()
	in, out, adm := freePort(t), freePort(t), freePort(t)
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(module(in, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &runtime{t: t, dir: dir, module: path,
		ingress: fmt.Sprintf("http://127.0.0.1:%d", in),
		egress:  fmt.Sprintf("http://127.0.0.1:%d", out),
		admin:   fmt.Sprintf("127.0.0.1:%d", adm)}
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("runtime log:\n%s", r.logs())
		}
	})
	return r
}

func (r *runtime) Write(p []byte) (int, error) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.log.Write(p)
}

func (r *runtime) logs() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	s := r.log.String()
	if len(s) > 20000 {
		s = "…" + s[len(s)-20000:]
	}
	return s
}

// start launches the process and waits until it is ready.
func (r *runtime) start() {
	r.t.Helper()
	saStart(r, "http", http.DefaultClient)
}

// kill sends SIGKILL and waits for the process to be gone. A test's own
// goroutine and its cleanup may both kill the process.
func (r *runtime) kill() {
	r.killMu.Lock()
	defer r.killMu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd = nil
}

// stop sends SIGTERM and waits for a clean exit.
func (r *runtime) stop() error {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(20 * time.Second):
		r.t.Fatal("statefun did not stop within 20s of SIGTERM")
	}
	err := r.cmd.ProcessState
	r.cmd = nil
	if !err.Success() {
		return fmt.Errorf("statefun exited with %v", err)
	}
	return nil
}

// send puts one message through the playground ingress.
func (r *runtime) send(path, typename, body string) (int, error) {
	req, _ := http.NewRequest(http.MethodPut, r.ingress+path, strings.NewReader(body))
	if typename != "" {
		req.Header.Set("Content-Type", "application/vnd."+typename)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// pop takes one record from an egress topic: payload, found. On a cluster
// node it reads the Kafka egress that stands in for the playground one.
func (r *runtime) pop(topic string) (string, bool, error) {
	if r.cluster != nil {
		return r.cluster.out.pop(r.cluster.prefix + topic)
	}
	resp, err := http.Get(r.egress + "/" + topic)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case 200:
		return string(b), true, nil
	case 404:
		return "", false, nil
	default:
		return "", false, fmt.Errorf("egress GET /%s: %s: %s", topic, resp.Status, b)
	}
}

// collect pops topic until want records have come or timeout passes.
func (r *runtime) collect(topic string, want int, timeout time.Duration) []string {
	r.t.Helper()
	var got []string
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		p, ok, err := r.pop(topic)
		if err != nil {
			r.t.Fatal(err)
		}
		if ok {
			got = append(got, p)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return got
}
