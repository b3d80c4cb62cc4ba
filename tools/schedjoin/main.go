// Command schedjoin splits the slow requests of the state API benchmark by
// what the machine's scheduler did meanwhile: how long the client's thread
// and the server's thread waited for a CPU, and who had the CPUs. It joins
// the benchmark's request log with the kernel's scheduler events, which the
// benchmark records with perf(1) when given -load.sched (root needed):
//
//	go test -c -o /tmp/bench.test ./bench && cd bench
//	/tmp/bench.test -test.run '^$' -test.benchtime 1x \
//	    -test.bench 'StateAPI/^load$/^(GET|GET-empty-process)$/^clients=1$' \
//	    -load.nice 10 -load.apibg 20s -load.apiops 8000 -load.sched /tmp/sched
//	go run ./tools/schedjoin -dir /tmp/sched -op GET
//
// The Go execution trace (tools/tracejoin) sees goroutines; this sees
// threads, so it tells a request that waited for the Go scheduler from one
// whose threads waited for the machine's cores.
//
// For each request slower than -slow, the answer's arrival is the last
// wake-up of a client thread, inside the request, by a thread not of the
// client (the server's thread writing the answer, or an interrupt). That
// splits the request into
//
//	server part  request sent → the client woken by the answer
//	client part  → the client has the answer; of which "cpu wait" is the
//	             woken client thread waiting for a CPU
//
// and, when the server's own thread wrote the answer, that thread's server
// part into on a CPU, runnable (wanting a CPU: preempted, or woken and not
// yet running) and asleep.
package main

import (
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "", "the benchmark's -load.sched directory")
	op := flag.String("op", "GET", "the measurement to split: GET, GET-healthz or GET-empty-process")
	slow := flag.Duration("slow", 1500*time.Microsecond, "requests slower than this are split")
	flag.Parse()
	if *dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	roles, err := readPids(filepath.Join(*dir, "pids"))
	if err != nil {
		log.Fatal(err)
	}
	reqs, err := readRequests(filepath.Join(*dir, "requests"))
	if err != nil {
		log.Fatal(err)
	}
	perf := exec.Command("perf", "script", "--ns", "-F", "trace:tid,pid,cpu,time,event,trace",
		"-i", filepath.Join(*dir, *op+".perf"))
	perf.Stderr = os.Stderr
	out, err := perf.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := perf.Start(); err != nil {
		log.Fatal(err)
	}
	tl, err := parse(out)
	if err != nil {
		log.Fatal(err)
	}
	if err := perf.Wait(); err != nil {
		log.Fatal(err)
	}
	server := "runtime"
	if *op == "GET-empty-process" {
		server = "empty"
	}
	report(os.Stdout, join(tl, reqs, roles, server, slow.Nanoseconds()), server, *slow)
	reportThreads(os.Stdout, tl, roles, server)
}

// reportThreads says what every role's threads did over the recording, and
// where the server's threads waited for a CPU.
func reportThreads(w *os.File, tl *timeline, roles map[int]string, server string) {
	fmt.Fprintln(w, "threads over the recording, by process:")
	loads := tl.loads(roles)
	for _, r := range slices.Sorted(maps.Keys(loads)) {
		l := loads[r]
		fmt.Fprintf(w, "  %-9s %.2f cores, %6.0f context switches/s, %6.0f wake-ups/s, %6.0f preemptions/s\n",
			r, l.cpu, l.switches, l.wakeups, l.preemptions)
	}
	const min = 200 * time.Microsecond
	wt := tl.waits(roles, server, min.Nanoseconds())
	fmt.Fprintf(w, "the %s's threads waited over %v for a CPU %.0f times a second, %.2f ms on average; meanwhile\n",
		server, min, wt.perSecond, wt.mean/1e6)
	fmt.Fprintf(w, "  the CPU it then ran on ran: %s\n", shares(wt.onItsCPU))
	fmt.Fprintf(w, "  the other CPUs ran:         %s\n", shares(wt.onOthers))
}

func shares(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*m[k]))
	}
	return strings.Join(parts, ", ")
}

func report(w *os.File, sp split, server string, slow time.Duration) {
	ms := func(ns float64) string { return fmt.Sprintf("%.2f ms", ns/1e6) }
	fmt.Fprintf(w, "%d requests inside the recording: p50 %s, p99 %s; %d slower than %v, %d of them attributed\n",
		sp.requests, ms(float64(sp.p50)), ms(float64(sp.p99)), sp.slow, slow, sp.attributed)
	if sp.attributed == 0 {
		return
	}
	fmt.Fprintf(w, "mean over those: server part %s, client part %s (of which the woken client thread waiting for a CPU %s)\n",
		ms(sp.serverPart), ms(sp.clientPart), ms(sp.clientCPUWait))
	fmt.Fprintf(w, "the answer woke the client from: %s\n", counts(sp.wakers))
	if sp.servedBy > 0 {
		fmt.Fprintf(w, "the %s thread that answered, during the server part (%d requests): on a CPU %s, runnable %s, asleep %s\n",
			server, sp.servedBy, ms(sp.srvOn), ms(sp.srvRunnable), ms(sp.srvSleep))
	}
	fmt.Fprintf(w, "the CPUs during the server parts: %s\n", shares(sp.cpuShare))
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// readPids reads the benchmark's "role pid" lines into pid → role.
func readPids(path string) (map[int]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roles := map[int]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var role string
		var pid int
		if _, err := fmt.Sscanf(line, "%s %d", &role, &pid); err != nil {
			return nil, fmt.Errorf("%s:%d: want \"role pid\": %v", path, i+1, err)
		}
		roles[pid] = role
	}
	return roles, nil
}

// readRequests reads the benchmark's "start end" lines.
func readRequests(path string) ([]request, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reqs []request
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r request
		if _, err := fmt.Sscanf(line, "%d %d", &r.start, &r.end); err != nil {
			return nil, fmt.Errorf("%s:%d: want \"start end\": %v", path, i+1, err)
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}
