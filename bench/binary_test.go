package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// flagBin runs a statefun binary as the runtime: the A/B comparison of two
// builds (bench/compare) runs the same benchmarks, with the load generator,
// the function and kfake of this tree, against each build in turn.
var flagBin = flag.String("load.bin", envStr("STATEFUN_BENCH_BIN", ""),
	"a statefun binary: BenchmarkEndToEnd, BenchmarkKafkaCounter and BenchmarkStateAPI run it (statefun run) as the runtime, in a child process, instead of this tree's runtime")

// binRuntime is a statefun binary (-load.bin) running a module in a child
// process, as an operator runs it: statefun run with the flags every
// release has had (--module, --data-dir, --admin-addr, --partitions,
// --listen-host), so that old builds can be measured too.
type binRuntime struct {
	admin  string // host:port of the admin listener
	pid    int
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has ended
	err    error         // how it ended, set before exited is closed
}

// startBinRuntime runs `bin run` on module, with dir/module.yaml and the
// store in dir/data, the admin listener on a free loopback port, and
// returns once /readyz answers 200. The process is stopped by stop, or
// killed when b ends.
func startBinRuntime(b *testing.B, bin, dir, module string) (*binRuntime, error) {
	if *flagTrace != "" {
		return nil, errors.New("bench: -load.trace records this tree's runtime; it cannot be used with -load.bin")
	}
	modPath := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(modPath, []byte(module), 0o644); err != nil {
		return nil, err
	}
	admin := "127.0.0.1:" + strconv.Itoa(freePort(b))
	args := []string{bin, "run", "--module", modPath, "--data-dir", filepath.Join(dir, "data"),
		"--admin-addr", admin, "--partitions", strconv.Itoa(*flagPartitions), "--listen-host", "127.0.0.1"}
	// The switches of docs/reference/limits.md's mechanisms, only when asked for:
	// older builds have no such flags.
	if os.Getenv("STATEFUN_BENCH_FIXED_CALLS") == "true" {
		args = append(args, "--fixed-calls")
	}
	if n := envInt("STATEFUN_BENCH_INGRESS_ANSWERS", 0); n != 0 {
		args = append(args, "--ingress-answers", strconv.Itoa(n))
	}
	if os.Getenv("STATEFUN_BENCH_ADMIN_LANE") == "false" {
		args = append(args, "--admin-lane=false")
	}
	argv := childArgv("runtime", args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// Warnings and worse, as this tree's runtime logs in the benchmarks;
	// an environment variable, not a flag, so a build without it ignores it.
	env := append(os.Environ(), "STATEFUN_LOG_LEVEL=warn")
	if *flagGOGC != 0 {
		env = append(env, "GOGC="+strconv.Itoa(*flagGOGC))
	}
	if *flagProcs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(*flagProcs))
	}
	cmd.Env = env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: -load.bin %s: %w", bin, err)
	}
	r := &binRuntime{admin: admin, pid: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go func() {
		select {
		case <-r.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := waitReadyz(ctx, &http.Client{Timeout: 10 * time.Second}, "http://"+admin+"/readyz", time.Minute); err != nil {
		select {
		case <-r.exited:
			return nil, fmt.Errorf("bench: %s run ended before it was ready: %v", bin, r.err)
		default:
		}
		return nil, err
	}
	return r, nil
}

// stop stops the runtime as an operator does (SIGTERM) and waits for it:
// an error if it does not end cleanly within a minute.
func (r *binRuntime) stop() error {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		<-r.exited
		return errors.New("bench: the runtime did not stop within a minute of SIGTERM")
	}
	if r.err != nil {
		return fmt.Errorf("bench: the runtime did not stop cleanly: %w", r.err)
	}
	return nil
}

// runtimeProc is the runtime of one measured run, on a fresh store: this
// tree's runtime in this process (through internal/app) or, with
// -load.bin, that binary in a child process.
type runtimeProc struct {
	admin      string // host:port of the admin listener
	pid        int    // the child's; 0 when in this process
	partitions int    // of the store; 0 when not known (a binary's default)
	dataDir    string
	// ownFormat says the store was written by this tree's code, so a run
	// can reopen it to check it; another build's format may differ.
	ownFormat bool
	close     func() error
}

// startRuntimeProc runs module with dir/module.yaml and the store in
// dir/data.
func startRuntimeProc(b *testing.B, dir, module string) (*runtimeProc, error) {
	dataDir := filepath.Join(dir, "data")
	if *flagBin != "" {
		r, err := startBinRuntime(b, *flagBin, dir, module)
		if err != nil {
			return nil, err
		}
		return &runtimeProc{admin: r.admin, pid: r.pid, partitions: *flagPartitions, dataDir: dataDir, close: r.stop}, nil
	}
	a, err := startApp(dir, module, *flagPartitions)
	if err != nil {
		return nil, err
	}
	return &runtimeProc{admin: a.Addr("admin"), partitions: a.Partitions(), dataDir: dataDir, ownFormat: true, close: a.Close}, nil
}
