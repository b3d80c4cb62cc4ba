// Command tracejoin splits the slow requests of the state API benchmark
// between the client's side and the runtime's, by joining the benchmark's
// request log with the runtime's execution trace.
//
//	cd bench && /tmp/bench.test -test.run '^$' -test.benchtime 1x \
//	    -test.bench 'StateAPI/^load$/^GET$/^clients=1$' -load.nice 10 \
//	    -load.apibg 5s -load.apiops 10000 \
//	    -load.trace /tmp/rt.trace -load.apilog /tmp/requests.txt
//	cd tools/tracejoin && go run . -trace /tmp/rt.trace -requests /tmp/requests.txt
//
// Both files are on CLOCK_MONOTONIC: the request log by construction, the
// trace because the Go runtime timestamps it with its monotonic clock. The
// trace keeps the runtime's last seconds only (a flight recorder), so keep
// the load short enough that the measured requests fall inside it.
//
// For each request slower than -slow, the runtime's goroutine serving the
// state API's connection (found by its stacks: the state API's handler or
// the admin lane's Read) gives four parts:
//
//	detect  request sent → that goroutine made runnable
//	runq    runnable → running
//	serve   running → the start of its answer's write
//	client  the end of that write → the client has the answer
//
// and the request is counted under its largest part. It lives in a module
// of its own so that the runtime does not depend on golang.org/x/exp/trace.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	tracePath := flag.String("trace", "", "the runtime's execution trace (bench -load.trace)")
	reqPath := flag.String("requests", "", "the benchmark's request log (bench -load.apilog)")
	slow := flag.Duration("slow", 1500*time.Microsecond, "requests slower than this are split")
	flag.Parse()
	if *tracePath == "" || *reqPath == "" {
		flag.Usage()
		os.Exit(2)
	}
	reqs, err := readRequests(*reqPath)
	if err != nil {
		log.Fatal(err)
	}
	evs, first, last, err := readTrace(*tracePath)
	if err != nil {
		log.Fatal(err)
	}
	var inside []span
	for _, r := range reqs {
		if r.start >= first && r.end <= last {
			inside = append(inside, r)
		}
	}
	fmt.Printf("trace %.2fs, %d of %d requests inside it\n", float64(last-first)/1e9, len(inside), len(reqs))
	report(split(inside, evs, int64(*slow)), *slow)
}

// span is one request: start and end on CLOCK_MONOTONIC, in nanoseconds.
type span struct{ start, end int64 }

func readRequests(path string) ([]span, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s span
		if _, err := fmt.Sscan(sc.Text(), &s.start, &s.end); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// transition is one state change of a goroutine that served the state API.
type transition struct {
	t        int64
	from, to trace.GoState
	top      string // the innermost function of the stack at the change
}

// readTrace returns, in time order, the transitions of the goroutines that
// served the state API's connections, and the trace's first and last times.
func readTrace(path string) (evs []transition, first, last int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	r, err := trace.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, 0, 0, err
	}
	serving := map[trace.GoID]bool{}
	all := map[trace.GoID][]transition{}
	for {
		ev, err := r.ReadEvent()
		if err != nil {
			break
		}
		t := int64(ev.Time())
		if first == 0 {
			first = t
		}
		last = t
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := st.Resource.Goroutine()
		if calls(st.Stack, "internal/stateapi.") || calls(st.Stack, "internal/lane.(*conn).Read") {
			serving[g] = true
		}
		from, to := st.Goroutine()
		all[g] = append(all[g], transition{t: t, from: from, to: to, top: innermost(st.Stack)})
	}
	for g, ts := range all {
		if serving[g] {
			evs = append(evs, ts...)
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t < evs[j].t })
	return evs, first, last, nil
}

func calls(s trace.Stack, fn string) bool {
	for f := range s.Frames() {
		if strings.Contains(f.Func, fn) {
			return true
		}
	}
	return false
}

func innermost(s trace.Stack) string {
	for f := range s.Frames() {
		return f.Func
	}
	return ""
}

// parts of one slow request, in nanoseconds.
type parts struct{ detect, runq, serve, client int64 }

// split returns the parts of each request slower than slow, or nothing for
// one whose serving goroutine it could not follow.
func split(reqs []span, evs []transition, slow int64) (out []parts) {
	for _, q := range reqs {
		if q.end-q.start <= slow {
			continue
		}
		var ready, run, write, written int64 = -1, -1, -1, -1
		i := sort.Search(len(evs), func(i int) bool { return evs[i].t >= q.start })
		for ; i < len(evs) && evs[i].t <= q.end; i++ {
			e := evs[i]
			switch {
			case ready < 0 && e.from == trace.GoWaiting && e.to == trace.GoRunnable:
				ready = e.t
			case ready >= 0 && run < 0 && e.from == trace.GoRunnable && e.to == trace.GoRunning:
				run = e.t
			case run >= 0 && e.to == trace.GoSyscall && e.top == "syscall.write":
				write, written = e.t, -1
			case write >= 0 && written < 0 && e.from == trace.GoSyscall:
				written = e.t
			}
		}
		if ready < 0 || run < 0 || write < 0 {
			out = append(out, parts{detect: -1})
			continue
		}
		if written < 0 || written > q.end {
			written = q.end
		}
		out = append(out, parts{detect: ready - q.start, runq: run - ready, serve: write - run, client: q.end - written})
	}
	return out
}

func report(ps []parts, slow time.Duration) {
	names := []string{"detect", "runq", "serve", "client"}
	largest := map[string]int{}
	sums := map[string]int64{}
	followed := 0
	for _, p := range ps {
		if p.detect < 0 {
			largest["not followed"]++
			continue
		}
		followed++
		v := []int64{p.detect, p.runq, p.serve, p.client}
		best := 0
		for i := range v {
			sums[names[i]] += v[i]
			if v[i] > v[best] {
				best = i
			}
		}
		largest[names[best]]++
	}
	fmt.Printf("%d requests slower than %s\n", len(ps), slow)
	for _, n := range append(names, "not followed") {
		line := fmt.Sprintf("  largest part %-12s %5d", n, largest[n])
		if n != "not followed" && followed > 0 {
			line += fmt.Sprintf("   mean %.3f ms", float64(sums[n])/float64(followed)/1e6)
		}
		fmt.Println(line)
	}
}
