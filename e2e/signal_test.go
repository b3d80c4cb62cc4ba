package e2e

import (
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGTERM that comes while the runtime is still starting — here as soon
// as its admin listener takes a connection, which is before the runtime
// has started its other listeners — stops it cleanly (exit 0, "shutting
// down"), as one that comes later does: an orchestrator may stop a process
// the moment it looks alive.
func TestSIGTERMDuringStart(t *testing.T) {
	for i := range 5 {
		dir := t.TempDir()
		module := filepath.Join(dir, "module.yaml")
		hostileWrite(t, module, "kind: io.statefun.playground.v1/ingress\nspec:\n  port: "+strconv.Itoa(freePort(t))+"\n---\nkind: io.statefun.playground.v1/egress\nspec:\n  port: "+strconv.Itoa(freePort(t))+"\n  topics: [out]\n", 0o644)
		admin := "127.0.0.1:" + strconv.Itoa(freePort(t))
		r := &runtime{t: t, dir: dir, module: module, admin: admin}
		r.cmd = exec.Command(binary, "run", "--module", module, "--data-dir", filepath.Join(dir, "data"), "--admin-addr", admin)
		r.cmd.Env = append(r.cmd.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
		r.cmd.Stdout, r.cmd.Stderr = r, r
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if c, err := net.Dial("tcp", admin); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				r.cmd.Process.Kill()
				t.Fatalf("run %d: the admin listener never came up:\n%s", i, r.logs())
			}
			time.Sleep(time.Millisecond)
		}
		r.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- r.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil || !strings.Contains(r.logs(), "shutting down") {
				t.Fatalf("run %d: SIGTERM during start: %v; want a clean exit that logs shutting down:\n%s", i, err, r.logs())
			}
		case <-time.After(20 * time.Second):
			r.cmd.Process.Kill()
			t.Fatalf("run %d: no exit within 20 s of SIGTERM:\n%s", i, r.logs())
		}
	}
}
