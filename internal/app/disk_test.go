package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/statefun-go/statefun/internal/diskguard"
	"github.com/statefun-go/statefun/internal/store"
)

// writeModule writes the counter module of startApp and returns its path
// and the ingress and egress URLs.
func writeModule(t *testing.T, dir, fnURL string) (path, in, out string) {
	inPort, outPort := freePort(t), freePort(t)
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
`, fnURL, inPort, outPort)
	path = filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, fmt.Sprintf("http://127.0.0.1:%d", inPort), fmt.Sprintf("http://127.0.0.1:%d", outPort)
}

// TestStoreFatalErrorStopsTheApp: when the disk refuses a write of the
// write-ahead log (ENOSPC), Pebble's error is fatal. The runtime used to
// panic (sometimes as "sync: unlock of unlocked mutex", without the cause);
// now it says the cause, turns /readyz false, reports Failed, and Close
// returns the error at once, so the process exits non-zero in order.
func TestStoreFatalErrorStopsTheApp(t *testing.T) {
	dir := t.TempDir()
	modPath, in, out := writeModule(t, dir, counterFunctions(t))
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite ||
			op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
	var logs syncBuffer
	a, err := Start(Config{ModulePath: modPath, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Partitions: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Store: store.Options{FS: fs}})
	if err != nil {
		t.Fatal(err)
	}
	send(t, in, "/test/counter/a", "x")
	if got := poll(t, out, 1); len(got) != 1 {
		t.Fatalf("egress before the fault: %v", got)
	}

	full.Store(true)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, in+"/test/counter/b", strings.NewReader("x"))
		req.Header.Set("Content-Type", "application/vnd.test/ping")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-a.Failed()
	resp, body := call(t, "GET", "http://"+a.Addr("admin")+"/readyz", "", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "no space left on device") {
		t.Errorf("/readyz after the fault: %s %s", resp.Status, body)
	}
	err = a.Close()
	if !errors.Is(err, store.ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close = %v, want the store's fatal error", err)
	}
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the cause was not logged:\n%s", logs.String())
	}
}

// TestStartFailsFastOnFullDisk: with less free space than half the reserve,
// Start stops at once with the cause.
func TestStartFailsFastOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	modPath, _, _ := writeModule(t, dir, "http://127.0.0.1:1")
	_, err := Start(Config{ModulePath: modPath, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DiskReserve: 1 << 62})
	if !errors.Is(err, diskguard.ErrLowSpace) || !strings.Contains(err.Error(), "needed to start") {
		t.Fatalf("Start = %v, want the low-space error", err)
	}
}

// TestCloseDoesNotWaitForSilentConnections: a connection that has sent no
// request (a TCP probe, a pre-opened pool connection) used to hold Close
// until it was five seconds old (http.Server.Shutdown's rule); it is now
// closed at once. The bound below is that rule, not a performance target.
func TestCloseDoesNotWaitForSilentConnections(t *testing.T) {
	a, _, _ := startApp(t, t.TempDir(), "http://127.0.0.1:1")
	c, err := net.Dial("tcp", a.Addr("admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Make sure the server has accepted it.
	if resp, _ := call(t, "GET", "http://"+a.Addr("admin")+"/healthz", "", ""); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Close waited for a connection that sent no request")
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the silent connection is still open")
	}
}

// TestPebbleLoggerRateLimits: Pebble repeats one error per retry; the
// logger passes one line per kind per pebbleLogEvery, then says how many it
// left out.
func TestPebbleLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	p := newPebbleLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Unix(0, 0)
	p.now = func() time.Time { return now }
	for i := range 156 {
		p.Errorf("background error: %s", fmt.Sprintf("attempt %d: no space left on device", i))
	}
	p.Errorf("write stall: %s", "L0 file count")
	if n := strings.Count(buf.String(), "background error"); n != 1 {
		t.Fatalf("%d lines for 156 repeats in one interval, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "write stall") {
		t.Error("another kind of line was held back")
	}
	now = now.Add(pebbleLogEvery)
	p.Errorf("background error: %s", "again")
	if !strings.Contains(buf.String(), "suppressed=155") {
		t.Errorf("the next line does not say how many were left out:\n%s", buf.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLowDiskRefusesNewWorkWith503: on a data directory whose filesystem
// has less free space than the reserve (but enough to start), the runtime
// runs, answers the ingress and state-API writes with 503 + Retry-After
// naming the cause, keeps reads working, and says why on /readyz. The
// reserve is set just above the real free space of the test's filesystem.
func TestLowDiskRefusesNewWorkWith503(t *testing.T) {
	dir := t.TempDir()
	modPath, in, _ := writeModule(t, dir, counterFunctions(t))
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	a, err := Start(Config{ModulePath: modPath, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DiskReserve: free + free/2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	req, _ := http.NewRequest(http.MethodPut, in+"/test/counter/alice", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/vnd.test/ping")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "free") {
		t.Fatalf("ingress: %s Retry-After=%q %q, want 503 with Retry-After naming the free space", resp.Status, resp.Header.Get("Retry-After"), body)
	}

	admin := "http://" + a.Addr("admin")
	req, _ = http.NewRequest(http.MethodPut, admin+"/state/test/counter/alice/count", strings.NewReader("1"))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Statefun-Type", "io.statefun.types/int")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("state API PUT: %s, want 503 with Retry-After", resp.Status)
	}

	resp, err = http.Get(admin + "/state/test/counter/alice/count")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("state API GET: %s, want reads to keep working (404: nothing stored)", resp.Status)
	}
	resp, err = http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "free") {
		t.Fatalf("/readyz: %s %q, want 503 naming the low disk", resp.Status, body)
	}
}
