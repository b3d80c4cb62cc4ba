package sdktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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

// StartJSServer starts testdata/jsfn/server.js (official JavaScript SDK
// 3.3.0) with node on a free local port, stops it when t ends and returns
// its endpoint URL. It skips t when node is not on PATH or when
// testdata/jsfn/node_modules is missing (run `npm ci` in testdata/jsfn).
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
	c := startChild(t, "node testdata/jsfn/server.js", cmd)
	return "http://" + c.addr + "/statefun"
}
