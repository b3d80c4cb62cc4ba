package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
)

// A timeline is what perf recorded of the scheduler, by thread: when each
// thread ran, how each run ended, and who woke it. Times are CLOCK_MONOTONIC
// nanoseconds.
type timeline struct {
	first, last int64
	tgid        map[int]int       // thread → its process, learnt from the samples it is current in
	runs        map[int][]run     // thread → its runs on a CPU, in time order
	outs        map[int][]swOut   // thread → how each run ended
	wakes       map[int][]wake    // thread → its wake-ups
	cpus        map[int][]cpuSpan // CPU → who ran on it (thread 0: idle)
}

type span struct{ from, to int64 }

type run struct {
	span
	cpu int
}

type swOut struct {
	at       int64
	runnable bool // preempted (state R): it still wanted a CPU
}

type wake struct {
	at    int64
	waker int // the thread current on the waking CPU; 0 for an interrupt on an idle CPU
}

type cpuSpan struct {
	span
	tid int
}

// Lines of `perf script --ns -F tid,pid,cpu,time,event,trace`:
//
//	5414/5432  [001] 16591.927457123:   sched:sched_switch: prev_comm=bench.test prev_pid=5432 prev_prio=120 prev_state=R ==> next_comm=bench.test next_pid=5410 next_prio=130
//	5414/5432  [001] 16591.927460001:   sched:sched_wakeup: comm=bench.test pid=5562 prio=120 target_cpu=000
//	^tgid/tid  ^cpu  ^seconds.nanoseconds ^event      ^the tracepoint's fields
var (
	lineRE   = regexp.MustCompile(`^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d{9}):\s+sched:(\w+):\s+(.*)$`)
	switchRE = regexp.MustCompile(`prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> .*next_pid=(\d+) next_prio=`)
	wakeupRE = regexp.MustCompile(` pid=(\d+) prio=\d+ target_cpu=\d+`)
)

// parse reads perf script's lines into a timeline; lines of other events
// are skipped.
func parse(r io.Reader) (*timeline, error) {
	tl := &timeline{
		tgid: map[int]int{}, runs: map[int][]run{}, outs: map[int][]swOut{},
		wakes: map[int][]wake{}, cpus: map[int][]cpuSpan{},
	}
	type current struct {
		tid   int
		since int64
	}
	cur := map[int]current{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		tgid, tid, cpu := atoi(m[1]), atoi(m[2]), atoi(m[3])
		at := int64(atoi(m[4]))*1e9 + int64(atoi(m[5]))
		if n == 0 {
			tl.first = at
		}
		n++
		tl.last = at
		if tid != 0 {
			tl.tgid[tid] = tgid
		}
		switch m[6] {
		case "sched_switch":
			f := switchRE.FindStringSubmatch(m[7])
			if f == nil {
				return nil, fmt.Errorf("schedjoin: a sched_switch without its fields: %q", sc.Text())
			}
			prev, state, next := atoi(f[1]), f[2], atoi(f[3])
			if c, ok := cur[cpu]; ok && c.tid == prev {
				tl.runs[prev] = append(tl.runs[prev], run{span{c.since, at}, cpu})
				tl.cpus[cpu] = append(tl.cpus[cpu], cpuSpan{span{c.since, at}, prev})
			}
			tl.outs[prev] = append(tl.outs[prev], swOut{at, state == "R" || state == "R+"})
			cur[cpu] = current{next, at}
		case "sched_wakeup":
			f := wakeupRE.FindStringSubmatch(m[7])
			if f == nil {
				return nil, fmt.Errorf("schedjoin: a sched_wakeup without its fields: %q", sc.Text())
			}
			woken := atoi(f[1])
			tl.wakes[woken] = append(tl.wakes[woken], wake{at, tid})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("schedjoin: no scheduler events (was perf recording sched:sched_switch and sched:sched_wakeup?)")
	}
	return tl, nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// roleOf names a thread's process by the benchmark's pids; threads of
// other processes (the kernel's included) are "other", the idle task
// "idle".
func (tl *timeline) roleOf(tid int, roles map[int]string) string {
	if tid == 0 {
		return "idle"
	}
	if r, ok := roles[tl.tgid[tid]]; ok {
		return r
	}
	return "other"
}

// request is one measured request: its start and end on CLOCK_MONOTONIC.
type request struct{ start, end int64 }

// split is where the slow requests' time went.
type split struct {
	requests, slow, attributed int
	p50, p99                   int64
	// Means over the attributed slow requests, in nanoseconds.
	serverPart, clientPart float64 // start → the client woken by the answer; → end
	clientCPUWait          float64 // the woken client thread waiting for a CPU
	// The server's thread that woke the client, during the server part
	// (when the waker is the server's).
	servedBy                     int
	srvOn, srvRunnable, srvSleep float64
	wakers                       map[string]int     // who woke the client with the answer
	cpuShare                     map[string]float64 // who had the CPUs during the server part, a fraction
}

// join splits each request slower than slow. The answer's arrival is the
// last wake-up, inside the request, of a client thread by a thread not of
// the client: the one that wrote the answer, or an interrupt delivering
// it. What follows is the client's own hand-offs.
func join(tl *timeline, reqs []request, roles map[int]string, server string, slow int64) split {
	var in []request
	for _, r := range reqs {
		if r.start >= tl.first && r.end <= tl.last {
			in = append(in, r)
		}
	}
	sp := split{requests: len(in), wakers: map[string]int{}, cpuShare: map[string]float64{}}
	if len(in) == 0 {
		return sp
	}
	lat := make([]int64, len(in))
	for i, r := range in {
		lat[i] = r.end - r.start
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sp.p50, sp.p99 = lat[len(lat)/2], lat[len(lat)*99/100]

	// The client's wake-ups by others, in time order.
	type cw struct {
		at       int64
		tid, who int
	}
	var clientWakes []cw
	for tid, ws := range tl.wakes {
		if tl.roleOf(tid, roles) != "client" {
			continue
		}
		for _, w := range ws {
			if tl.roleOf(w.waker, roles) != "client" {
				clientWakes = append(clientWakes, cw{w.at, tid, w.waker})
			}
		}
	}
	sort.Slice(clientWakes, func(i, j int) bool { return clientWakes[i].at < clientWakes[j].at })

	var cpuTotal float64
	for _, r := range in {
		if r.end-r.start <= slow {
			continue
		}
		sp.slow++
		i := sort.Search(len(clientWakes), func(i int) bool { return clientWakes[i].at > r.end }) - 1
		if i < 0 || clientWakes[i].at < r.start {
			continue
		}
		w := clientWakes[i]
		ran, ok := tl.firstRunFrom(w.tid, w.at)
		if !ok || ran > r.end {
			continue
		}
		sp.attributed++
		sp.serverPart += float64(w.at - r.start)
		sp.clientPart += float64(r.end - w.at)
		sp.clientCPUWait += float64(ran - w.at)
		sp.wakers[tl.roleOf(w.who, roles)]++
		if tl.roleOf(w.who, roles) == server {
			on, runnable, sleep := tl.states(w.who, r.start, w.at)
			sp.servedBy++
			sp.srvOn += float64(on)
			sp.srvRunnable += float64(runnable)
			sp.srvSleep += float64(sleep)
		}
		for cpu := range tl.cpus {
			tl.during(cpu, r.start, w.at, func(tid int, d int64) {
				sp.cpuShare[tl.roleOf(tid, roles)] += float64(d)
				cpuTotal += float64(d)
			})
		}
	}
	if n := float64(sp.attributed); n > 0 {
		sp.serverPart /= n
		sp.clientPart /= n
		sp.clientCPUWait /= n
	}
	if n := float64(sp.servedBy); n > 0 {
		sp.srvOn /= n
		sp.srvRunnable /= n
		sp.srvSleep /= n
	}
	for k := range sp.cpuShare {
		sp.cpuShare[k] /= cpuTotal
	}
	return sp
}

// firstRunFrom is when tid next got a CPU at or after t.
func (tl *timeline) firstRunFrom(tid int, t int64) (int64, bool) {
	runs := tl.runs[tid]
	i := sort.Search(len(runs), func(i int) bool { return runs[i].from >= t })
	if i == len(runs) {
		return 0, false
	}
	return runs[i].from, true
}

// states splits [from, to) of thread tid into time on a CPU, time wanting
// one (preempted, or woken and not yet running) and time asleep.
func (tl *timeline) states(tid int, from, to int64) (on, runnable, sleep int64) {
	runs := tl.runs[tid]
	// The off-CPU gaps are those between consecutive runs.
	prevEnd := int64(-1)
	for _, r := range runs {
		on += overlap(r.span, from, to)
		if prevEnd >= 0 {
			gapRunnable, gapSleep := tl.gap(tid, span{prevEnd, r.from})
			runnable += overlap(gapRunnable, from, to)
			sleep += overlap(gapSleep, from, to)
		}
		prevEnd = r.to
	}
	return on, runnable, sleep
}

// gap splits an off-CPU gap into its asleep part and its runnable part:
// preempted threads want a CPU throughout; a thread that blocked wants
// one from its wake-up on.
func (tl *timeline) gap(tid int, g span) (runnable, asleep span) {
	outs := tl.outs[tid]
	i := sort.Search(len(outs), func(i int) bool { return outs[i].at > g.from }) - 1
	if i >= 0 && outs[i].at == g.from && outs[i].runnable {
		return g, span{}
	}
	wakeAt := g.to      // no wake-up seen: count it asleep, not as wanting a CPU
	ws := tl.wakes[tid] // in time order, as perf wrote them
	if i := sort.Search(len(ws), func(i int) bool { return ws[i].at >= g.from }); i < len(ws) && ws[i].at <= g.to {
		wakeAt = ws[i].at
	}
	return span{wakeAt, g.to}, span{g.from, wakeAt}
}

func overlap(s span, from, to int64) int64 {
	a, b := max(s.from, from), min(s.to, to)
	if b <= a {
		return 0
	}
	return b - a
}

// roleLoad is what the threads of one role did over the recording.
type roleLoad struct {
	cpu                            float64 // cores
	switches, wakeups, preemptions float64 // a second
}

// loads sums each role's threads: CPU time, context switches, wake-ups and
// preemptions (switched out while still runnable).
func (tl *timeline) loads(roles map[int]string) map[string]roleLoad {
	secs := float64(tl.last-tl.first) / 1e9
	out := map[string]roleLoad{}
	add := func(tid int, f func(*roleLoad)) {
		r := tl.roleOf(tid, roles)
		l := out[r]
		f(&l)
		out[r] = l
	}
	for tid, runs := range tl.runs {
		for _, r := range runs {
			add(tid, func(l *roleLoad) { l.cpu += float64(r.to-r.from) / 1e9 / secs; l.switches += 1 / secs })
		}
	}
	for tid, outs := range tl.outs {
		for _, o := range outs {
			if o.runnable {
				add(tid, func(l *roleLoad) { l.preemptions += 1 / secs })
			}
		}
	}
	for tid, ws := range tl.wakes {
		add(tid, func(l *roleLoad) { l.wakeups += float64(len(ws)) / secs })
	}
	return out
}

// cpuWaits describes the times a role's threads waited longer than min for
// a CPU: how many a second, their mean, and who ran meanwhile on the CPU
// the thread then got and on the others (fractions of that time).
type cpuWaits struct {
	perSecond, mean float64
	onItsCPU        map[string]float64
	onOthers        map[string]float64
}

func (tl *timeline) waits(roles map[int]string, role string, min int64) cpuWaits {
	w := cpuWaits{onItsCPU: map[string]float64{}, onOthers: map[string]float64{}}
	var n, total, itsTotal, othersTotal float64
	for tid, runs := range tl.runs {
		if tl.roleOf(tid, roles) != role {
			continue
		}
		for i := 1; i < len(runs); i++ {
			wanted, _ := tl.gap(tid, span{runs[i-1].to, runs[i].from})
			if wanted.to-wanted.from <= min {
				continue
			}
			n++
			total += float64(wanted.to - wanted.from)
			for cpu := range tl.cpus {
				tl.during(cpu, wanted.from, wanted.to, func(tid int, d int64) {
					if cpu == runs[i].cpu {
						w.onItsCPU[tl.roleOf(tid, roles)] += float64(d)
						itsTotal += float64(d)
					} else {
						w.onOthers[tl.roleOf(tid, roles)] += float64(d)
						othersTotal += float64(d)
					}
				})
			}
		}
	}
	if n == 0 {
		return w
	}
	w.perSecond = n / (float64(tl.last-tl.first) / 1e9)
	w.mean = total / n
	for k := range w.onItsCPU {
		w.onItsCPU[k] /= itsTotal
	}
	for k := range w.onOthers {
		w.onOthers[k] /= othersTotal
	}
	return w
}

// during calls f with each thread that ran on cpu within [from, to) and for
// how long.
func (tl *timeline) during(cpu int, from, to int64, f func(tid int, d int64)) {
	spans := tl.cpus[cpu]
	for i := sort.Search(len(spans), func(i int) bool { return spans[i].to > from }); i < len(spans) && spans[i].from < to; i++ {
		if d := overlap(spans[i].span, from, to); d > 0 {
			f(spans[i].tid, d)
		}
	}
}
