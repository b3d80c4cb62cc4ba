package sdktest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// JS function types served by testdata/jsfn/server.js.
const (
	// JSCounterFn has the states "seen" (io.statefun.types/int) and
	// "last_name" (io.statefun.types/string). Each message adds 1 to seen,
	// stores the message's text in last_name, sends the string "<seen>" to
	// jsfn/echo/<id> and egresses {"topic":"js","payload":"<id>:<seen>"}.
	JSCounterFn = "jsfn/counter"
	// JSEchoFn has no state. Each message egresses
	// {"topic":"js","payload":"echo:<id>:<caller>"} where <caller> is
	// "namespace/type/id", or "none" when the message has no caller.
	JSEchoFn = "jsfn/echo"
	// JSTopic is the egress topic of both JS functions.
	JSTopic = "js"
)

const (
	nodeStartTimeout = time.Minute
	nodeStopGrace    = 5 * time.Second
	stderrKeepSize   = 64 << 10
)

// StartJSServer starts testdata/jsfn/server.js (official JavaScript SDK
// 3.3.0) with node on a free local port, stops it when t ends and returns
// its endpoint URL. It skips t when node is not on PATH or when
// testdata/jsfn/node_modules is missing (run `npm ci` in testdata/jsfn).
//
// The server runs as a child process that prints "listening on <port>" once
// it accepts connections and exits when its stdin is closed, so it dies
// with the test process.
func StartJSServer(t testing.TB) (url string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("sdktest: node is not on PATH; the JavaScript SDK server cannot run")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "testdata", "jsfn")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "apache-flink-statefun")); err != nil {
		t.Skip("sdktest: testdata/jsfn/node_modules is missing; run `npm ci` in testdata/jsfn")
	}

	cmd := exec.Command(node, "server.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PORT=0", "HOST=127.0.0.1", "JSFN_EXIT_ON_STDIN_EOF=1")
	stderr := &tailBuffer{max: stderrKeepSize}
	cmd.Stderr = stderr
	cmd.WaitDelay = nodeStopGrace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("sdktest: node: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("sdktest: node: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("sdktest: starting node: %v", err)
	}
	exited := make(chan struct{})
	portc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				portc <- strings.TrimSpace(rest)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		// Wait only once stdout is drained, as StdoutPipe requires.
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(nodeStopGrace):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sdktest: node testdata/jsfn/server.js stderr:\n%s", stderr)
		}
	})

	select {
	case port := <-portc:
		return "http://127.0.0.1:" + port + "/statefun"
	case <-exited:
		t.Fatalf("sdktest: node exited before listening (%v):\n%s", cmd.ProcessState, stderr)
	case <-time.After(nodeStartTimeout):
		t.Fatalf("sdktest: node did not print \"listening on\" within %v:\n%s", nodeStartTimeout, stderr)
	}
	return ""
}

// moduleRoot finds the directory of this module's go.mod, starting from
// this source file (or, when built with -trimpath, the working directory).
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && bytes.Contains(b, []byte("module github.com/statefun-go/statefun\n")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("sdktest: cannot find the go.mod of github.com/statefun-go/statefun")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
