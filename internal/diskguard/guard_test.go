package diskguard

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeDisk is a free-space function the test turns.
type fakeDisk struct{ free atomic.Uint64 }

func (d *fakeDisk) Free(string) (uint64, error) { return d.free.Load(), nil }

const mb = 1 << 20

func TestGuardRefusesBelowReserveAndRecovers(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(100 * mb)
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	g, err := New(Options{Dir: t.TempDir(), Reserve: 40 * mb, Free: disk.Free,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }, LogEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(); err != nil {
		t.Fatalf("Admit with room = %v", err)
	}

	disk.free.Store(30 * mb)
	g.Check()
	err = g.Admit()
	if !errors.Is(err, ErrLowSpace) || !strings.Contains(err.Error(), "30.0 MiB free, below the reserve of 40.0 MiB") {
		t.Fatalf("Admit below the reserve = %v", err)
	}
	if g.Ready() == nil {
		t.Fatal("Ready while refusing work")
	}
	// The cause is said once per LogEvery, not once per check.
	for range 100 {
		now = now.Add(time.Second / 2)
		g.Check()
	}
	if n := strings.Count(logs.String(), "below the reserve"); n != 1 {
		t.Fatalf("%d warnings in 50 s, want 1:\n%s", n, logs.String())
	}
	now = now.Add(time.Minute)
	g.Check()
	if n := strings.Count(logs.String(), "below the reserve"); n != 2 {
		t.Fatalf("%d warnings after LogEvery, want 2", n)
	}

	disk.free.Store(41 * mb)
	g.Check()
	if err := g.Admit(); err != nil {
		t.Fatalf("Admit after space returned = %v", err)
	}
	if !strings.Contains(logs.String(), "accepting new work") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
}

func TestGuardStartFailsFastOnFullDisk(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(10 * mb)
	_, err := New(Options{Dir: "/data", Reserve: 40 * mb, Free: disk.Free})
	if !errors.Is(err, ErrLowSpace) || !strings.Contains(err.Error(), "/data has 10.0 MiB free, below the 20.0 MiB needed to start") {
		t.Fatalf("New on a full disk = %v", err)
	}
	// Between the start minimum and the reserve it starts, refusing work.
	disk.free.Store(30 * mb)
	g, err := New(Options{Dir: "/data", Reserve: 40 * mb, Free: disk.Free})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(g.Admit(), ErrLowSpace) {
		t.Fatal("a guard started below the reserve admits work")
	}
}

// TestGuardInterval: Start measures on its own, and Stop ends it.
func TestGuardInterval(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(100 * mb)
	measured := make(chan struct{}, 1)
	free := func(p string) (uint64, error) {
		select {
		case measured <- struct{}{}:
		default:
		}
		return disk.Free(p)
	}
	g, err := New(Options{Dir: t.TempDir(), Reserve: 40 * mb, Free: free, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-measured // New's measurement
	disk.free.Store(1 * mb)
	g.Start()
	<-measured
	<-measured // a full Check has applied the first value read after the change
	g.Stop()
	if !errors.Is(g.Admit(), ErrLowSpace) {
		t.Fatal("the interval did not see the shortage")
	}
	g.Stop() // idempotent
}

// TestGuardRealFilesystem runs the guard on a real 8 MiB tmpfs, filled by a
// file: in a user and mount namespace of its own (the test runs itself
// again there), so that no privileges are needed. Skipped where namespaces
// are not available.
func TestGuardRealFilesystem(t *testing.T) {
	if dir := os.Getenv("DISKGUARD_TMPFS"); dir != "" {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
			t.Skipf("mount tmpfs: %v", err)
		}
		defer unix.Unmount(dir, 0)
		g, err := New(Options{Dir: dir, Reserve: 4 * mb})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Admit(); err != nil {
			t.Fatalf("empty 8 MiB tmpfs: %v", err)
		}
		fill := filepath.Join(dir, "fill")
		if err := os.WriteFile(fill, make([]byte, 5*mb), 0o644); err != nil {
			t.Fatal(err)
		}
		g.Check()
		if err := g.Admit(); !errors.Is(err, ErrLowSpace) {
			t.Fatalf("tmpfs with 3 MiB free: Admit = %v", err)
		} else {
			t.Log(err)
		}
		if err := os.Remove(fill); err != nil {
			t.Fatal(err)
		}
		g.Check()
		if err := g.Admit(); err != nil {
			t.Fatalf("after freeing space: %v", err)
		}
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuardRealFilesystem$", "-test.v")
	cmd.Env = append(os.Environ(), "DISKGUARD_TMPFS="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "operation not permitted") {
		t.Skipf("no user namespaces here: %v", err)
	}
	t.Logf("in a namespace:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("--- SKIP")) {
		t.Skip("tmpfs could not be mounted")
	}
}

// A nil Guard (turned off) admits everything, so it can be handed to the
// engine as it is.
func TestNilGuardAdmits(t *testing.T) {
	var g *Guard
	admit := g.Admit
	if err := admit(); err != nil || g.Ready() != nil {
		t.Fatal("a nil guard refused work")
	}
	g.Stop()
}
