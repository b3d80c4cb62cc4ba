package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// roleEnv makes the harness binary (or its test binary) do one job in a
// child process instead of benchmarking: that is how our runtime and both
// counters get processes of their own without a build step. Its values are
// the keys of roles.
const roleEnv = "BENCH_RESTATE_ROLE"

// roles are the jobs a child process can do; each runs until it is told
// to stop and then exits the process.
var roles = map[string]func() error{
	"statefun-runtime": runStatefunRuntime, // our runtime, through internal/app as cmd/statefun runs it
	"statefun-counter": runStatefunCounter, // sdktest/counter, official StateFun Go SDK v3.3.0
	"restate-counter":  runRestateCounter,  // Counter virtual object, Restate Go SDK v1.2.0
}

// runRole runs the role named by roleEnv, if any, and exits; it returns
// when this process is not a child.
func runRole() {
	name := os.Getenv(roleEnv)
	if name == "" {
		return
	}
	role, ok := roles[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: unknown role %q\n", name)
		os.Exit(2)
	}
	if err := role(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: role %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// proc is a child process: a system's server or its function. Its stdout
// and stderr go to a log file; lines it prints that start with "bench: "
// are also delivered on lines (how a role says where it listens).
type proc struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logPath string
	lines   chan string
	exited  chan struct{}
	started time.Time
}

// startProc starts path with args and extra environment variables,
// logging to logPath (appended, so a restarted server keeps one log).
// The child gets SIGKILL if the harness dies.
func startProc(name, logPath, path string, args []string, env ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stderr = logf
	p := &proc{name: name, cmd: cmd, stdin: stdin, logPath: logPath, lines: make(chan string, 16), exited: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("bench: starting %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if rest, ok := strings.CutPrefix(line, "bench: "); ok {
				select {
				case p.lines <- rest:
				default:
				}
			}
		}
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// startRole starts this binary in a role (see roles).
func startRole(role, logPath string, env ...string) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startProc(role, logPath, exe, nil, append(env, roleEnv+"="+role)...)
}

// expect waits for the next announced line that starts with prefix and
// returns the rest of it.
func (p *proc) expect(prefix string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case line := <-p.lines:
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return strings.TrimSpace(rest), nil
			}
		case <-p.exited:
			return "", fmt.Errorf("bench: %s exited before it said %q; its log: %s\n%s", p.name, prefix, p.logPath, p.tail())
		case <-deadline:
			return "", fmt.Errorf("bench: %s did not say %q within %v; its log: %s", p.name, prefix, timeout, p.logPath)
		}
	}
}

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to timeout for the exit, then kills. It
// returns how long the process took to exit after the signal.
func (p *proc) stop(timeout time.Duration) (time.Duration, error) {
	if !p.alive() {
		return 0, nil
	}
	t0 := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		took := time.Since(t0)
		if st := p.cmd.ProcessState; st != nil && !st.Success() {
			return took, fmt.Errorf("bench: %s exited with %v after SIGTERM; its log: %s", p.name, st, p.logPath)
		}
		return took, nil
	case <-time.After(timeout):
		p.kill()
		return time.Since(t0), fmt.Errorf("bench: %s did not exit within %v of SIGTERM; killed", p.name, timeout)
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// tail returns the end of the process's log.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// waitStdin blocks until stdin is closed: a role's parent closes it to say
// stop (and it is closed for us if the parent dies).
func waitStdin(ctx context.Context) {
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// procCPU returns the CPU time (user and system) a process has used so
// far, from /proc (Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100
	// on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bench: unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("bench: unexpected /proc stat format")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: unexpected /proc stat format")
	}
	return time.Duration(ut+st) * (time.Second / 100), nil
}

// dirSize returns the bytes of the regular files under dir.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// cpuTimes is the machine's CPU time from /proc/stat, in seconds summed
// over all CPUs.
type cpuTimes struct{ busy, steal, total float64 }

func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var v [8]float64 // user nice system idle iowait irq softirq steal, in USER_HZ
	for i := range v {
		n, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return cpuTimes{}
		}
		v[i] = n / 100
	}
	t := cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], steal: v[7]}
	for _, x := range v {
		t.total += x
	}
	return t
}
