package sdktest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
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

// sdkServerPkg is the child-process binary hosting package sdkfn.
const sdkServerPkg = "github.com/statefun-go/statefun/internal/sdktest/cmd/sdkserver"

const (
	buildTimeout   = 5 * time.Minute
	startTimeout   = time.Minute
	stopGrace      = 5 * time.Second
	stderrKeepSize = 64 << 10
)

// sdkBin is the sdkserver binary of this test process, built on first use.
var sdkBin struct {
	once sync.Once
	path string
	err  error
}

// SDKServerBinary builds the command internal/sdktest/cmd/sdkserver, once
// per test process, and returns its path. Tests that need an SDK function
// server in a process they control, for example one they kill and restart
// on a fixed port, run it with
// "-fn counter -addr host:port -exit-on-stdin-eof".
//
// It needs the go command on PATH (go test puts it there). Binaries are
// kept in the user cache directory under a name derived from their content,
// shared by concurrent test processes, and removed a day after their last
// use.
func SDKServerBinary(t testing.TB) string {
	t.Helper()
	sdkBin.once.Do(func() { sdkBin.path, sdkBin.err = buildSDKServer() })
	if sdkBin.err != nil {
		t.Fatalf("sdktest: %v", sdkBin.err)
	}
	return sdkBin.path
}

const binKeep = 24 * time.Hour

func buildSDKServer() (string, error) {
	dir := binCacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	exe := ""
	if runtime.GOOS == "windows" {
		exe = ".exe"
	}
	out := filepath.Join(tmp, "sdkserver"+exe)
	if err := goBuild(out); err != nil {
		return "", err
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	// Renaming is atomic, so a process starting the binary under its
	// final name never sees it half-written.
	final := filepath.Join(dir, fmt.Sprintf("sdkserver-%x%s", sum[:12], exe))
	if err := os.Rename(out, final); err != nil {
		if _, statErr := os.Stat(final); statErr != nil {
			return "", err
		}
	}
	now := time.Now()
	_ = os.Chtimes(final, now, now)
	pruneBinCache(dir, now)
	return final, nil
}

func binCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "statefun-sdktest")
	}
	return filepath.Join(os.TempDir(), "statefun-sdktest")
}

// pruneBinCache removes binaries and abandoned build directories that have
// not been used for binKeep.
func pruneBinCache(dir string, now time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "sdkserver-") && !strings.HasPrefix(e.Name(), "build-") {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > binKeep {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

func goBuild(out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s needs the go command on PATH: %w", sdkServerPkg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, sdkServerPkg)
	if root, err := moduleRoot(); err == nil {
		cmd.Dir = root
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", sdkServerPkg, err, b)
	}
	return nil
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

// child is a server process started by a test. It prints
// "listening on <port|host:port>" on stdout once it accepts connections, and
// exits when its stdin is closed.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string // host:port
	stderr *tailBuffer
	exited chan struct{}
	err    error // valid after exited is closed

	stopOnce sync.Once
}

// startChild starts cmd, waits for its "listening on" line and stops it when
// t ends (logging its stderr if t failed).
func startChild(t testing.TB, name string, cmd *exec.Cmd) *child {
	t.Helper()
	c := &child{name: name, cmd: cmd, stderr: &tailBuffer{max: stderrKeepSize}, exited: make(chan struct{})}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("sdktest: %s: %v", name, err)
	}
	c.stdin = stdin
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = c.stderr
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		t.Fatalf("sdktest: starting %s: %v", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		_ = pw.Close()
		close(c.exited)
	}()

	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addrc <- strings.TrimSpace(rest)
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("sdktest: %s stderr:\n%s", name, c.stderr.String())
		}
	})

	select {
	case a := <-addrc:
		if !strings.Contains(a, ":") {
			a = "127.0.0.1:" + a
		}
		c.addr = a
		return c
	case <-c.exited:
		t.Fatalf("sdktest: %s exited before listening (%v):\n%s", name, c.err, c.stderr.String())
	case <-time.After(startTimeout):
		t.Fatalf("sdktest: %s did not print \"listening on\" within %v:\n%s", name, startTimeout, c.stderr.String())
	}
	return nil
}

// stop closes the child's stdin, waits a little for it to exit and kills it
// otherwise. It is idempotent.
func (c *child) stop() {
	c.stopOnce.Do(func() {
		_ = c.stdin.Close()
		select {
		case <-c.exited:
			return
		case <-time.After(stopGrace):
		}
		_ = c.cmd.Process.Kill()
		<-c.exited
	})
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
