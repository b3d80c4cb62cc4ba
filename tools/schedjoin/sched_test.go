package main

import (
	"strings"
	"testing"
)

// One slow request, drawn (ms from 100 s; client 10, runtime 20, a stand-in
// process 30):
//
//	cpu0  client 11 ─0.1─ S │ stand-in 31 ──────────────── 3.5 │ client 11 ─ 5.0
//	cpu1  runtime 21 ─0.5─ R│ stand-in 32 ── 2.5 │ runtime 21 ─3.0: wakes 11─ 3.7 S │ client 12 ─ 5.0
//
// The request runs from 0 to 4.0. The runtime's answer wakes the client at
// 3.0 (server part 3.0); the client gets a CPU at 3.5 (it waited 0.5) and
// ends at 4.0 (client part 1.0). Over [0, 3.0] the runtime thread was on a
// CPU for 1.0 and preempted, wanting one, for 2.0.
const script = `
    0/0     [000] 100.000000000:  sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=client next_pid=11 next_prio=120
    0/0     [001] 100.000000000:  sched:sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=runtime next_pid=21 next_prio=120
   10/11    [000] 100.000100000:  sched:sched_switch: prev_comm=client prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=stand in next_pid=31 next_prio=130
   20/21    [001] 100.000500000:  sched:sched_switch: prev_comm=runtime prev_pid=21 prev_prio=120 prev_state=R ==> next_comm=stand in next_pid=32 next_prio=130
   30/32    [001] 100.002500000:  sched:sched_switch: prev_comm=stand in prev_pid=32 prev_prio=130 prev_state=R ==> next_comm=runtime next_pid=21 next_prio=120
   20/21    [001] 100.003000000:  sched:sched_wakeup: comm=client pid=11 prio=120 target_cpu=000
   30/31    [000] 100.003500000:  sched:sched_switch: prev_comm=stand in prev_pid=31 prev_prio=130 prev_state=R ==> next_comm=client next_pid=11 next_prio=120
   10/11    [000] 100.003600000:  sched:sched_wakeup: comm=client pid=12 prio=120 target_cpu=001
   20/21    [001] 100.003700000:  sched:sched_switch: prev_comm=runtime prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=client next_pid=12 next_prio=120
   10/11    [000] 100.005000000:  sched:sched_switch: prev_comm=client prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
   10/12    [001] 100.005000000:  sched:sched_switch: prev_comm=client prev_pid=12 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
`

func TestJoinSplitsASlowRequest(t *testing.T) {
	tl, err := parse(strings.NewReader(script))
	if err != nil {
		t.Fatal(err)
	}
	roles := map[int]string{10: "client", 20: "runtime", 30: "function"}
	const ms = 1e6
	reqs := []request{
		{100*1e9 + 0, 100*1e9 + 4*ms},        // slow
		{100*1e9 + 4.1*ms, 100*1e9 + 4.2*ms}, // fast: not split
		{100*1e9 + 4.5*ms, 100*1e9 + 6*ms},   // outside the recording
	}
	sp := join(tl, reqs, roles, "runtime", 1.5*ms)
	if sp.requests != 2 || sp.slow != 1 || sp.attributed != 1 {
		t.Fatalf("requests %d, slow %d, attributed %d; want 2, 1, 1", sp.requests, sp.slow, sp.attributed)
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if got < want-1e3 || got > want+1e3 {
			t.Errorf("%s = %.3f ms, want %.3f ms", what, got/ms, want/ms)
		}
	}
	near("server part", sp.serverPart, 3*ms)
	near("client part", sp.clientPart, 1*ms)
	near("client's CPU wait", sp.clientCPUWait, 0.5*ms)
	if sp.servedBy != 1 || sp.wakers["runtime"] != 1 {
		t.Fatalf("answered by %v (%d by the server); want the runtime", sp.wakers, sp.servedBy)
	}
	near("runtime on a CPU", sp.srvOn, 1*ms)
	near("runtime runnable", sp.srvRunnable, 2*ms)
	near("runtime asleep", sp.srvSleep, 0)
	// CPU time over [0, 3.0] on two CPUs: client 0.1, stand-ins 2.9 + 2.0,
	// runtime 1.0.
	near("function's CPU share", sp.cpuShare["function"]*ms, 4.9/6*ms)
	near("runtime's CPU share", sp.cpuShare["runtime"]*ms, 1.0/6*ms)

	// Over the 5 ms recorded, the runtime waited once for a CPU (2 ms, by a
	// preemption): its CPU and the other ran the function's stand-ins.
	wt := tl.waits(roles, "runtime", 0.2*ms)
	near("waits a second", wt.perSecond*ms, 200*ms)
	near("mean wait", wt.mean, 2*ms)
	if wt.onItsCPU["function"] != 1 || wt.onOthers["function"] != 1 {
		t.Errorf("during the wait: its CPU %v, the other %v; want the function on both", wt.onItsCPU, wt.onOthers)
	}
	l := tl.loads(roles)["runtime"]
	near("runtime preemptions a second", l.preemptions*ms, 200*ms)
	near("runtime cores", l.cpu*ms, (0.5+1.2)/5*ms) // runs 0–0.5 and 2.5–3.7
}

// A thread that blocked is asleep until its wake-up and runnable after it.
func TestGapSplitsAtTheWakeUp(t *testing.T) {
	tl, err := parse(strings.NewReader(`
    0/0     [000] 100.000000000:  sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=r next_pid=21 next_prio=120
   20/21    [000] 100.001000000:  sched:sched_switch: prev_comm=r prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=f next_pid=31 next_prio=130
   30/31    [000] 100.002000000:  sched:sched_wakeup: comm=r pid=21 prio=120 target_cpu=000
   30/31    [000] 100.003500000:  sched:sched_switch: prev_comm=f prev_pid=31 prev_prio=130 prev_state=R ==> next_comm=r next_pid=21 next_prio=120
   20/21    [000] 100.004000000:  sched:sched_switch: prev_comm=r prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
`))
	if err != nil {
		t.Fatal(err)
	}
	on, runnable, sleep := tl.states(21, 100e9, 100e9+4e6)
	if on != 1.5e6 || runnable != 1.5e6 || sleep != 1e6 {
		t.Fatalf("on %d, runnable %d, asleep %d ns; want 1.5 ms, 1.5 ms, 1 ms", on, runnable, sleep)
	}
}

func TestParseRefusesAMangledSwitch(t *testing.T) {
	_, err := parse(strings.NewReader("   20/21    [000] 100.000000000:  sched:sched_switch: prev_comm=r prev_pid=21\n"))
	if err == nil || !strings.Contains(err.Error(), "sched_switch without its fields") {
		t.Fatalf("err = %v, want a mangled sched_switch refused", err)
	}
	if _, err := parse(strings.NewReader("nothing here\n")); err == nil {
		t.Fatal("a script without scheduler events was accepted")
	}
}
