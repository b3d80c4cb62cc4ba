package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// TestDelayedMessagesBoundedMemory schedules 50,000 delayed messages far in
// the future on a runtime whose partitions keep at most 100 of them in
// memory (--timer-window 100, 4 partitions), and 800 near ones with
// cancellation tokens, half of them cancelled before they are due (the
// cancelled ones are the latest of each sender, past the window). Each
// partition holds at most its window (statefun_delayed_in_memory), before
// and after a SIGKILL and restart, while the store holds every delayed
// message; the near ones that were not cancelled arrive exactly once, and
// the cancelled ones never. The process's RSS is logged and held to a
// loose bound (a race build).
func TestDelayedMessagesBoundedMemory(t *testing.T) {
	const (
		window  = 100
		parts   = 4
		far     = 50_000
		perCmd  = 1000
		senders = 8
		perSend = 100 // near ones per sender; the second half is cancelled
	)
	fs := sdktest.StartFeatureServer(t)
	rt := newRuntimeWith(t, playgroundModule(fs.URL, []string{"sdktest"}, featureTopics))
	rt.routeEgress(fs)
	args := []string{"--timer-window", strconv.Itoa(window), "--partitions", strconv.Itoa(parts)}
	saStart(rt, "http", http.DefaultClient, args...)
	rr := &reportReader{rt: rt, topic: sdktest.DefaultTopic}
	command(t, rt, sdktest.FeaturesFn, "warm", report("warm"))
	rr.wait(t, "warm", 1, 20*time.Second)

	// The far ones: an hour away, from 50 senders.
	for c := range far / perCmd {
		var cmds []sdktest.Command
		for i := range perCmd {
			cmds = append(cmds, sdktest.Command{Op: sdktest.OpSendAfter, To: &sdktest.Target{ID: fmt.Sprint("sink-", i%100)},
				DelayMs: time.Hour.Milliseconds(), Command: &sdktest.Command{Op: sdktest.OpReport, Tag: "far"}})
		}
		command(t, rt, sdktest.FeaturesFn, fmt.Sprint("far-", c), seq(cmds...))
	}
	// The near ones: 6 s away and later, each with a token.
	for s := range senders {
		var cmds []sdktest.Command
		for i := range perSend {
			cmds = append(cmds, sdktest.Command{Op: sdktest.OpSendAfter, To: &sdktest.Target{ID: fmt.Sprint("near-", i%10)},
				DelayMs: 6000 + int64(i)*10, Token: fmt.Sprint("k", i),
				Command: &sdktest.Command{Op: sdktest.OpReport, Tag: fmt.Sprintf("near-%d-%d", s, i)}})
		}
		command(t, rt, sdktest.FeaturesFn, fmt.Sprint("near-sender-", s), seq(cmds...))
	}
	for s := range senders {
		var cmds []sdktest.Command
		for i := perSend / 2; i < perSend; i++ {
			cmds = append(cmds, sdktest.Command{Op: sdktest.OpCancel, Token: fmt.Sprint("k", i)})
		}
		cmds = append(cmds, report(fmt.Sprint("cancelled-", s)))
		command(t, rt, sdktest.FeaturesFn, fmt.Sprint("near-sender-", s), seq(cmds...))
	}
	for s := range senders {
		rr.wait(t, fmt.Sprint("cancelled-", s), 1, 30*time.Second)
	}
	if n := countPrefix(rr, "near-"); n > 0 {
		t.Fatalf("%d near delayed messages arrived before every cancellation was applied; make them later", n)
	}
	held := func(when string) {
		t.Helper()
		total := 0.0
		for p := range parts {
			n := metric(t, rt, fmt.Sprintf(`statefun_delayed_in_memory{partition="%d"}`, p))
			if n > window {
				t.Errorf("%s: partition %d holds %v delayed messages in memory, over its window of %d", when, p, n, window)
			}
			total += n
		}
		rss := processRSS(t, rt.cmd.Process.Pid)
		t.Logf("%s: %v delayed messages in memory of %d pending; RSS %d MiB, %v goroutines",
			when, total, far+senders*perSend/2, rss>>20, metric(t, rt, "go_goroutines"))
		// A race build takes several times a normal one's memory; the
		// bound only catches every delayed message held again.
		if rss > 1500<<20 {
			t.Errorf("%s: RSS %d MiB", when, rss>>20)
		}
	}
	held("scheduled")

	rt.kill()
	saStart(rt, "http", http.DefaultClient, args...)
	held("restarted")

	// The near ones that were not cancelled arrive, once each.
	want := senders * perSend / 2
	deadline := time.Now().Add(60 * time.Second)
	for countPrefix(rr, "near-") < want && time.Now().Before(deadline) {
		rr.poll(t)
		time.Sleep(50 * time.Millisecond)
	}
	rr.settle(t, time.Second)
	got := map[string]int{}
	for _, a := range rr.seen {
		if strings.HasPrefix(a.rep.Tag, "near-") {
			got[a.rep.Tag]++
		}
	}
	for s := range senders {
		for i := range perSend {
			tag := fmt.Sprintf("near-%d-%d", s, i)
			switch n := got[tag]; {
			case i < perSend/2 && n != 1:
				t.Errorf("delayed message %s arrived %d times, want once", tag, n)
			case i >= perSend/2 && n != 0:
				t.Errorf("cancelled delayed message %s arrived %d times", tag, n)
			}
		}
	}
	if n := countPrefix(rr, "far"); n > 0 {
		t.Errorf("%d delayed messages due in an hour arrived", n)
	}
	held("delivered")
}

// countPrefix counts the reports seen whose tag starts with prefix.
func countPrefix(r *reportReader, prefix string) int {
	n := 0
	for _, a := range r.seen {
		if strings.HasPrefix(a.rep.Tag, prefix) {
			n++
		}
	}
	return n
}

// processRSS reads a process's resident set size in bytes from /proc
// (0 where there is none).
func processRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
