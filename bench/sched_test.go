package bench

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

var flagSched = flag.String("load.sched", envStr("STATEFUN_BENCH_SCHED", ""), "a directory: record the kernel's scheduling events (perf record, needs root) during each loaded one-client GET of the state API benchmark, for tools/schedjoin")

// schedRecorder records the kernel's scheduler events — every context
// switch and wake-up on the machine — with perf(1) while a measurement
// runs, so that tools/schedjoin can say how much of a slow request was
// spent by a thread waiting for a CPU, in the client and in the server.
// The Go execution trace (-load.trace) cannot: it sees the runtime's
// goroutines, not whether the runtime's threads had a CPU.
//
// In its directory it writes pids (the role and pid of each process of the
// benchmark, a line each), requests (every measured request's start and
// end, as -load.apilog) and one <name>.perf per recorded measurement. perf
// timestamps with CLOCK_MONOTONIC (-k mono), the request log's clock.
type schedRecorder struct{ dir string }

// newSchedRecorder returns the recorder of -load.sched, or nil without it.
func newSchedRecorder(b *testing.B, pids map[string]int) *schedRecorder {
	if *flagSched == "" {
		return nil
	}
	if _, err := exec.LookPath("perf"); err != nil {
		b.Fatalf("bench: -load.sched needs perf(1): %v", err)
	}
	if err := os.MkdirAll(*flagSched, 0o755); err != nil {
		b.Fatal(err)
	}
	var list string
	for role, pid := range pids {
		if pid != 0 {
			list += fmt.Sprintf("%s %d\n", role, pid)
		}
	}
	if err := os.WriteFile(filepath.Join(*flagSched, "pids"), []byte(list), 0o644); err != nil {
		b.Fatal(err)
	}
	return &schedRecorder{dir: *flagSched}
}

// requests is where the request log goes when no -load.apilog is given.
func (r *schedRecorder) requests() string { return filepath.Join(r.dir, "requests") }

// record starts recording into <name>.perf and returns the function that
// stops it.
func (r *schedRecorder) record(b *testing.B, name string) (stop func()) {
	out := filepath.Join(r.dir, name+".perf")
	cmd := exec.Command("perf", "record", "-q", "-a", "-k", "mono",
		"-e", "sched:sched_switch", "-e", "sched:sched_wakeup", "-o", out)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("bench: perf record: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // perf attaches to every CPU before the first request
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		// perf ends by the signal it was stopped with, its file written.
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGINT {
				err = nil
			}
		}
		if err != nil {
			b.Errorf("bench: perf record: %v", err)
		}
	}
}
