package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"
)

// config is the size of a run; see the flags in main.go.
type config struct {
	Keys        []int         // key counts of workloads 1-3
	Messages    int           // increments per workload-1 run
	Reads       int           // reads per workload-2 run
	Writes      int           // writes per workload-3 run
	Clients     int           // concurrent clients (connections)
	MaxTime     time.Duration // bound on the sending phase of one load
	RestartKeys int           // keys of state before workload 4's restarts
	FillTime    time.Duration // bound on filling workload 4's keys
	ProfileDir  string        // CPU profile of our runtime, when set
	ProfileMsgs int           // increments of the profiled run
	Log         io.Writer     // progress
}

// key is the id of key i of a set.
func key(prefix string, i int) string { return fmt.Sprintf("%s%d", prefix, i) }

// keyPrefix names the keys of one key count, so that the runs of one
// system instance do not share keys.
func keyPrefix(keys int) string { return fmt.Sprintf("k%d-", keys) }

// cpuMeter measures the CPU time of a system's processes over a window.
type cpuMeter struct {
	pids  []int
	start []time.Duration
}

func startCPU(s system) cpuMeter {
	m := cpuMeter{pids: s.PIDs()}
	for _, pid := range m.pids {
		d, _ := procCPU(pid)
		m.start = append(m.start, d)
	}
	return m
}

// used returns the CPU time each process used since the start, in the
// order of PIDs (server, then function).
func (m cpuMeter) used() cpuUse {
	var u cpuUse
	for i, pid := range m.pids {
		d, _ := procCPU(pid)
		if d -= m.start[i]; i == 0 {
			u.Server = d
		} else {
			u.Function += d
		}
	}
	return u
}

// cpuUse is CPU time of a system's server and of its function.
type cpuUse struct{ Server, Function time.Duration }

func (u cpuUse) total() time.Duration { return u.Server + u.Function }

// perOp returns server, function and total CPU microseconds per op.
func (u cpuUse) perOp(ops int) (server, function, total float64) {
	if ops == 0 {
		return 0, 0, 0
	}
	f := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(ops) }
	return f(u.Server), f(u.Function), f(u.total())
}

// incResult is one workload-1 run: increments of keys keys through the
// ingress.
type incResult struct {
	Ack     result        // each increment until the ingress's durable ack
	Applied time.Duration // from the first request until all were applied
	CPU     cpuUse        // CPU time of the system's processes meanwhile
	Profile string        // CPU profile of our runtime over the run
	Checked int           // keys whose count was checked afterwards
}

// AppliedRate is increments applied per second.
func (r incResult) AppliedRate() float64 {
	if r.Applied <= 0 {
		return 0
	}
	return float64(r.Ack.OK) / r.Applied.Seconds()
}

// CPUPerOp is the system's CPU time per increment, in microseconds.
func (r incResult) CPUPerOp() float64 { _, _, t := r.CPU.perOp(r.Ack.OK); return t }

// runIncrements sends n increments over keys keys (key i mod keys, named
// with prefix) through the system's ingress, waits until all are applied,
// then checks the counts (see checkCounts). With profile set (our runtime
// only) the run is CPU-profiled into that file.
func runIncrements(ctx context.Context, s system, prefix string, keys, n int, profile string, cfg config) (incResult, error) {
	done := make([]bool, n)
	before, err := s.Applied(ctx)
	if err != nil {
		return incResult{}, err
	}
	r := incResult{Profile: profile}
	if profile != "" {
		if err := s.(*statefunSystem).profile(ctx, true, profile); err != nil {
			return r, err
		}
	}
	cpu := startCPU(s)
	t0 := time.Now()
	r.Ack, err = drive(ctx, n, cfg.Clients, cfg.MaxTime, func(ctx context.Context, i int) error {
		err := s.Increment(ctx, key(prefix, i%keys))
		done[i] = err == nil // each i is one goroutine's
		return err
	})
	if err != nil {
		return r, err
	}
	want := before + int64(r.Ack.OK)
	err = pollSince(ctx, t0, 20*time.Millisecond, 10*time.Minute, s.Name()+": all increments applied", func() (bool, error) {
		n, err := s.Applied(ctx)
		if errors.Is(err, errBusy) {
			return false, nil
		}
		return n >= want, err
	})
	r.Applied = time.Since(t0)
	r.CPU = cpu.used()
	if r.Profile != "" {
		if perr := s.(*statefunSystem).profile(ctx, false, ""); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return r, err
	}
	counts := make([]int64, keys)
	for i, ok := range done {
		if ok {
			counts[i%keys]++
		}
	}
	r.Checked, err = checkCounts(ctx, s, prefix, counts, cfg)
	return r, err
}

// maxChecked bounds how many keys checkCounts reads.
const maxChecked = 500

// checkCounts reads the counters of up to maxChecked keys, spread evenly,
// and compares each with want (indexed by key): every acknowledged
// increment applied exactly once. It returns how many keys it checked.
func checkCounts(ctx context.Context, s system, prefix string, want []int64, cfg config) (int, error) {
	n := min(len(want), maxChecked)
	_, err := drive(ctx, n, cfg.Clients, 5*time.Minute, func(ctx context.Context, i int) error {
		j := i * len(want) / n
		return waitCount(ctx, s, key(prefix, j), want[j], time.Minute)
	})
	return n, err
}

// waitCount reads key's counter until it is want. Our Applied counts the
// function's answers, whose results land in the partition a moment later,
// so a count below want is read again (up to timeout); a count above it
// is an increment applied twice, an error at once.
func waitCount(ctx context.Context, s system, k string, want int64, timeout time.Duration) error {
	var got int64
	var failed error // from the check itself, as opposed to the timeout
	err := pollUntil(ctx, 2*time.Millisecond, timeout, "", func() (bool, error) {
		n, found, err := s.Read(ctx, k)
		switch {
		case err != nil:
			failed = err
		case found && n > want:
			failed = fmt.Errorf("bench: %s: %s counts %d, more than the %d increments it was sent", s.Name(), k, n, want)
		case found:
			got = n
		}
		return got == want, failed
	})
	if failed == nil && err != nil {
		return fmt.Errorf("bench: %s: %s counts %d after the increments, want %d (%v)", s.Name(), k, got, want, err)
	}
	return err
}

// opResult is one workload-2 or workload-3 run.
type opResult struct {
	Ops     result
	Clients int
	CPU     cpuUse
}

// CPUPerOp is the system's CPU time per operation, in microseconds.
func (r opResult) CPUPerOp() float64 { _, _, t := r.CPU.perOp(r.Ops.OK); return t }

// filled is how many keys of a key count hold a counter after its
// workload-1 run: key i got an increment when i < messages.
func filled(keys int, inc incResult) int { return max(min(keys, inc.Ack.OK), 1) }

// runReads reads counters of the first n keys of the key count through
// the system's state access, spread over the keys, and checks each.
func runReads(ctx context.Context, s system, keys, n int, cfg config) (opResult, error) {
	prefix := keyPrefix(keys)
	cpu := startCPU(s)
	res, err := drive(ctx, cfg.Reads, cfg.Clients, cfg.MaxTime, func(ctx context.Context, i int) error {
		k := key(prefix, (i*7919)%n)
		v, found, err := s.Read(ctx, k)
		if err != nil {
			return err
		}
		if !found || v < 1 {
			return fmt.Errorf("bench: %s: %s reads %d (found %v), want a count of at least 1", s.Name(), k, v, found)
		}
		return nil
	})
	return opResult{Ops: res, Clients: min(cfg.Clients, cfg.Reads), CPU: cpu.used()}, err
}

// runWrites writes counters of the first n keys through the system's state
// access, each write until it is durable and visible. No two clients
// write the same key: client w writes the keys w, w+c, w+2c, ...
func runWrites(ctx context.Context, s system, keys, n int, cfg config) (opResult, error) {
	prefix := keyPrefix(keys)
	c := max(min(cfg.Clients, n), 1)
	cpu := startCPU(s)
	res, err := drive(ctx, cfg.Writes, c, cfg.MaxTime, func(ctx context.Context, i int) error {
		w, j := i%c, i/c
		k := key(prefix, w+c*(j%max(n/c, 1)))
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return s.Write(ctx, k, int64(1_000_000+i))
	})
	return opResult{Ops: res, Clients: c, CPU: cpu.used()}, err
}

// restartResult is workload 4: restarts with keys keys of state.
type restartResult struct {
	Keys      int
	FillTime  time.Duration // one increment per key, until all were applied
	DiskBytes int64         // the data directory at the clean stop
	Stop      time.Duration // SIGTERM until exit
	Ready     time.Duration // start until the readiness check passes (clean restart)
	FirstRead time.Duration // start until a read returns a filled key's count (clean restart)
	CrashRdy  time.Duration // the same two after a SIGKILL
	CrashRead time.Duration
}

// fill sends one increment to each of keys keys and waits until all are
// applied.
func fill(ctx context.Context, s system, keys int, cfg config) (time.Duration, error) {
	before, err := s.Applied(ctx)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	res, err := drive(ctx, keys, cfg.Clients, cfg.FillTime, func(ctx context.Context, i int) error {
		return s.Increment(ctx, key("r-", i))
	})
	if err != nil {
		return 0, err
	}
	if res.OK < keys {
		return 0, fmt.Errorf("bench: %s: filled only %d of %d keys within %v (raise -fill-time)", s.Name(), res.OK, keys, cfg.FillTime)
	}
	want := before + int64(keys)
	err = pollSince(ctx, t0, 20*time.Millisecond, 30*time.Minute, s.Name()+": restart keys applied", func() (bool, error) {
		n, err := s.Applied(ctx)
		return n >= want, err
	})
	return time.Since(t0), err
}

// restartTimes starts the system and returns how long it took to be ready
// and to answer a read of probe with want.
func restartTimes(ctx context.Context, s system, probe string, want int64) (ready, read time.Duration, err error) {
	t0 := time.Now()
	if err := s.Start(ctx); err != nil {
		return 0, 0, err
	}
	ready = time.Since(t0)
	err = pollUntil(ctx, time.Millisecond, 5*time.Minute, s.Name()+": first read after restart", func() (bool, error) {
		v, found, err := s.Read(ctx, probe)
		return err == nil && found && v == want, nil
	})
	return ready, time.Since(t0), err
}

// runRestart fills keys keys with one increment each on a fresh system,
// stops it with SIGTERM and measures the clean restart; then increments
// every key again, kills it with SIGKILL and measures the crash restart.
// Both restarts follow the same amount of fresh writes.
func runRestart(ctx context.Context, s system, keys int, cfg config) (restartResult, error) {
	r := restartResult{Keys: keys}
	if err := s.Start(ctx); err != nil {
		return r, err
	}
	var err error
	if r.FillTime, err = fill(ctx, s, keys, cfg); err != nil {
		return r, err
	}
	fmt.Fprintf(cfg.Log, "  %s: %d keys filled in %.1fs\n", s.Name(), keys, r.FillTime.Seconds())
	probe := key("r-", keys/2)
	if r.Stop, err = s.Stop(); err != nil {
		return r, err
	}
	r.DiskBytes = dirSize(s.DataDir())
	if r.Ready, r.FirstRead, err = restartTimes(ctx, s, probe, 1); err != nil {
		return r, err
	}
	if _, err := fill(ctx, s, keys, cfg); err != nil {
		return r, err
	}
	s.Kill()
	r.CrashRdy, r.CrashRead, err = restartTimes(ctx, s, probe, 2)
	return r, err
}

// systemResults is everything measured on one system.
type systemResults struct {
	Inc      map[int]incResult
	Reads    map[int]opResult
	Writes   map[int]opResult
	Profiled *incResult // the profiled increment run (ours only)
	Restart  restartResult
	Settings []string
}

// runSystem runs workloads 1-3 on one instance of a system (fresh data
// directory), then workload 4 on another.
func runSystem(ctx context.Context, newSys func(dir string) system, dir string, cfg config) (*systemResults, error) {
	out := &systemResults{Inc: map[int]incResult{}, Reads: map[int]opResult{}, Writes: map[int]opResult{}}
	s := newSys(filepath.Join(dir, "w123"))
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		return out, err
	}
	out.Settings = s.Settings()
	for _, keys := range cfg.Keys {
		inc, err := runIncrements(ctx, s, keyPrefix(keys), keys, cfg.Messages, "", cfg)
		if err != nil {
			return out, fmt.Errorf("workload 1 (%d keys): %w", keys, err)
		}
		out.Inc[keys] = inc
		fmt.Fprintf(cfg.Log, "  %s, %s: increments %.0f/s acked (p50 %.2f ms, p99 %.2f ms), %.0f/s applied, %.0f µs CPU each; %d counts checked\n",
			s.Name(), plural(keys, "key"), inc.Ack.Rate(), ms(inc.Ack.Quantile(0.5)), ms(inc.Ack.Quantile(0.99)), inc.AppliedRate(), inc.CPUPerOp(), inc.Checked)
		n := filled(keys, inc)
		rd, err := runReads(ctx, s, keys, n, cfg)
		if err != nil {
			return out, fmt.Errorf("workload 2 (%d keys): %w", keys, err)
		}
		out.Reads[keys] = rd
		wr, err := runWrites(ctx, s, keys, n, cfg)
		if err != nil {
			return out, fmt.Errorf("workload 3 (%d keys): %w", keys, err)
		}
		out.Writes[keys] = wr
		fmt.Fprintf(cfg.Log, "  %s, %s: reads %.0f/s (p50 %.2f ms), writes %.0f/s (p50 %.2f ms)\n",
			s.Name(), plural(keys, "key"), rd.Ops.Rate(), ms(rd.Ops.Quantile(0.5)), wr.Ops.Rate(), ms(wr.Ops.Quantile(0.5)))
	}
	if _, ok := s.(*statefunSystem); ok && cfg.ProfileDir != "" && cfg.ProfileMsgs > 0 {
		keys := slices.Max(cfg.Keys)
		path := filepath.Join(cfg.ProfileDir, fmt.Sprintf("statefun-increments-%d.pprof", keys))
		inc, err := runIncrements(ctx, s, "p-", keys, cfg.ProfileMsgs, path, cfg)
		if err != nil {
			return out, fmt.Errorf("profiled run: %w", err)
		}
		out.Profiled = &inc
		fmt.Fprintf(cfg.Log, "  %s, profiled run (not in the table), %d keys: increments %.0f/s acked, %.0f/s applied; profile %s\n",
			s.Name(), keys, inc.Ack.Rate(), inc.AppliedRate(), path)
	}
	s.Close()
	if cfg.RestartKeys > 0 {
		rs := newSys(filepath.Join(dir, "w4"))
		defer rs.Close()
		r, err := runRestart(ctx, rs, cfg.RestartKeys, cfg)
		if err != nil {
			return out, fmt.Errorf("workload 4 (%d keys): %w", cfg.RestartKeys, err)
		}
		out.Restart = r
		fmt.Fprintf(cfg.Log, "  %s, restart with %d keys: stop %.2fs, ready %.2fs, first read %.2fs; after a crash ready %.2fs, first read %.2fs; %.1f MiB on disk\n",
			rs.Name(), r.Keys, r.Stop.Seconds(), r.Ready.Seconds(), r.FirstRead.Seconds(), r.CrashRdy.Seconds(), r.CrashRead.Seconds(), mib(r.DiskBytes))
		rs.Close()
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(n int64) float64 { return float64(n) / (1 << 20) }
