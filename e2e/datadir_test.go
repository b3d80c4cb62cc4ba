package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// startArgs launches the runtime with extra arguments of run (a later flag
// wins over runArgs's) and waits until /readyz answers so that ok holds.
func (r *runtime) startArgs(ok func(status int, body string) bool, extra ...string) {
	r.t.Helper()
	r.cmd = exec.Command(binary, r.runArgs(extra...)...)
	r.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(r.cmd, r.exited)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if status, body, err := r.readyz(); err == nil && ok(status, body) {
			return
		}
		select {
		case <-r.exited:
			r.t.Fatalf("statefun exited during start:\n%s", r.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.t.Fatalf("statefun not in the expected state 30s after start:\n%s", r.logs())
}

func ready(status int, _ string) bool { return status == http.StatusOK }

// The data directory is deleted (rm -rf) while the runtime acknowledges
// messages: the runtime stops acknowledging at once (the next commit checks
// the directory), stops, and says that acknowledged work may be lost rather
// than that it is durable. A restart on the deleted directory — and on an
// empty one in its place — is refused, naming --new-store; with the flag a
// new empty store starts, and later restarts need no flag.
func TestDataDirDeletedUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary several times")
	}
	t.Parallel()
	fn := crashFunction(t, &sdktest.EgressSender{})
	rt := newRuntime(t, fn, []string{"crash"}, []string{"counts", "ticks"})
	rt.start()
	data := filepath.Join(rt.dir, "data")

	type answer struct {
		sent, done time.Time
		status     int
	}
	var (
		mu      sync.Mutex
		answers []answer
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Now()
				status, err := rt.send(fmt.Sprintf("/crash/counter/w%d-%d", w, i%50), "crash/inc", "{}")
				if err != nil {
					status = 0 // refused, or the process is gone
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				answers = append(answers, answer{sent, time.Now(), status})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	removed := time.Now()
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rt.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the runtime still runs 10s after its data directory was deleted:\n%s", rt.logs())
	}
	exitedAt := time.Now()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if rt.cmd.ProcessState.Success() {
		t.Errorf("exit status %v, want a failure", rt.cmd.ProcessState)
	}
	rt.cmd = nil

	var before, after, late int
	for _, a := range answers {
		switch {
		case a.status != http.StatusOK:
		case a.done.Before(removed):
			before++
		case a.sent.After(removed.Add(100 * time.Millisecond)):
			late++
		default:
			after++
		}
	}
	t.Logf("acknowledged: %d before the deletion, %d in flight at it, %d sent over 100ms after it; exit %v after it",
		before, after, late, exitedAt.Sub(removed).Round(time.Millisecond))
	if before == 0 {
		t.Fatal("nothing was acknowledged before the deletion: the test proves nothing")
	}
	if late > 0 {
		t.Errorf("%d messages sent more than 100ms after the data directory was deleted were acknowledged", late)
	}
	logs := rt.logs()
	if !strings.Contains(logs, "the data directory was deleted or replaced") || !strings.Contains(logs, "may be lost") || !strings.Contains(logs, "last_seen_intact=") {
		t.Errorf("the log does not say that acknowledged work may be lost:\n%s", logs)
	}
	if strings.Contains(logs, "everything acknowledged is durable") {
		t.Errorf("the log claims everything acknowledged is durable:\n%s", logs)
	}

	// A restart on the deleted directory, and on an empty one in its
	// place, is refused and leaves nothing behind.
	out := saRefused(t, rt.runArgs()[1:]...)
	if !strings.Contains(out, "--new-store") || !strings.Contains(out, "holds no store") {
		t.Errorf("a start on the deleted directory: %s", out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the refused start created the data directory: %v", err)
	}
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if out := saRefused(t, rt.runArgs()[1:]...); !strings.Contains(out, "--new-store") {
		t.Errorf("a start on an empty directory in its place: %s", out)
	}

	// The operator's decision: a new empty store.
	rt.startArgs(ready, "--new-store")
	rt.waitLog(5*time.Second, "started a new empty store in place of the lost one", "--new-store")
	if status, err := rt.send("/crash/counter/x", "crash/inc", "{}"); err != nil || status != http.StatusOK {
		t.Fatalf("a message to the new store: %d %v", status, err)
	}
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}
	rt.startArgs(ready)
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}
}

// Deleted while idle, the data directory is noticed by the periodic check:
// the runtime stops within seconds and says so.
func TestDataDirDeletedWhileIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	t.Parallel()
	fn := crashFunction(t, &sdktest.EgressSender{})
	rt := newRuntime(t, fn, []string{"crash"}, []string{"counts", "ticks"})
	rt.start()
	removed := time.Now()
	if err := os.RemoveAll(filepath.Join(rt.dir, "data")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rt.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the runtime still runs 10s after its idle data directory was deleted:\n%s", rt.logs())
	}
	t.Logf("stopped %v after the deletion", time.Since(removed).Round(time.Millisecond))
	rt.cmd = nil
	if logs := rt.logs(); !strings.Contains(logs, "the data directory was deleted or replaced") {
		t.Errorf("log:\n%s", logs)
	}
}

var resetFlag = regexp.MustCompile(`--kafka-egress-reset-marker=(kc/out=[0-9a-f]{32}@[0-9]+)`)

// A runtime moves to a new, empty data directory while the exactly-once
// Kafka egress's position marker stays where the old one left it. The
// egress refuses to deliver — also once the new store wrote more records
// than the old marker's position, also across a restart — and /readyz says
// so, naming the flag that resolves it; nothing is delivered or removed.
// With the operator's --kafka-egress-reset-marker, the new store's records
// all reach the topic, and the output holds every effect of both stores
// exactly once.
func TestKafkaEgressNewDataDirRefusedUntilReset(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary several times")
	}
	t.Parallel()
	needKcat(t)
	cluster := kafkaCluster(t)
	brokers := brokersOf(cluster)
	fn := kafkaCounterFn(t, "kc/out")
	rt := newRuntimeWith(t, func(in, out int) string { return kafkaModule(fn, brokers, "exactly-once", in, out) })
	rt.start()

	// send sends rounds messages to each of ids through the playground
	// ingress, one goroutine per id.
	send := func(ids []string, rounds int) map[string]int {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if status, err := rt.send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
						t.Errorf("send to %s: %d %v", id, status, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		want := map[string]int{}
		for _, id := range ids {
			want[id] = rounds
		}
		return want
	}
	ids := func(prefix string) (out []string) {
		for i := range 10 {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}

	// The first data directory: 200 effects delivered, the marker at 200.
	wantA := send(ids("a"), 20)
	rt.waitCounters(wantA, 30*time.Second)
	checkEffects(t, kcatReadUntil(t, brokers, "counts", 200, 30*time.Second), wantA, nil)
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}

	// A fresh data directory: refused from the start.
	dirB := filepath.Join(rt.dir, "data-b")
	refusing := func(status int, body string) bool {
		return status == http.StatusServiceUnavailable && strings.Contains(body, "is not this store's")
	}
	rt.startArgs(refusing, "--data-dir", dirB)
	resumeErrors := func() float64 {
		v, err := rt.metric("statefun_kafka_egress_errors_total", `egress="kc/out"`, `stage="resume"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// 300 records: the new store's positions pass the old marker's 200.
	wantB := send(ids("b"), 30)
	rt.waitCounters(wantB, 30*time.Second)
	// The relay judges the marker again at each retry: wait for one after
	// the new store passed the old position.
	seen := resumeErrors()
	deadline := time.Now().Add(20 * time.Second)
	for resumeErrors() <= seen {
		if status, body, _ := rt.readyz(); !refusing(status, body) {
			t.Fatalf("the refusal did not hold once the new store passed the old marker: /readyz %d %s; the output topic holds %d records, want the first store's 200",
				status, body, len(kcatRead(t, brokers, "counts")))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not try again within 20s:\n%s", rt.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, body, _ := rt.readyz()
	if !refusing(503, body) || !strings.Contains(body, "--kafka-egress-reset-marker=kc/out=") {
		t.Fatalf("/readyz after the new store passed the marker: %s", body)
	}
	if n, _ := rt.metric("statefun_kafka_egress_records_total", `egress="kc/out"`); n != 0 {
		t.Errorf("the new store delivered %v records past a foreign marker", n)
	}
	if out := kcatRead(t, brokers, "counts"); len(out) != 200 {
		t.Errorf("the output topic holds %d records, want the first store's 200", len(out))
	}
	rt.waitLog(5*time.Second, "level=ERROR", "refusing to deliver")
	m := resetFlag.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/readyz names no reset: %s", body)
	}
	ref := m[1]

	// The refusal holds across a restart.
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}
	rt.startArgs(refusing, "--data-dir", dirB)
	if _, body, _ := rt.readyz(); !strings.Contains(body, ref) {
		t.Fatalf("after a restart /readyz names another marker: %s (want %s)", body, ref)
	}
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}

	// The operator's resolution.
	rt.startArgs(ready, "--data-dir", dirB, "--kafka-egress-reset-marker", ref)
	rt.waitLog(10*time.Second, "level=WARN", "replaced another store's position marker", "by=")
	want := map[string]int{}
	for _, w := range []map[string]int{wantA, wantB} {
		for k, v := range w {
			want[k] = v
		}
	}
	out := kcatReadUntil(t, brokers, "counts", 500, 30*time.Second)
	checkEffects(t, out, want, nil)
}
