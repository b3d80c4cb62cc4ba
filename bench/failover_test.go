package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/kafkatail"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

var (
	flagFailoverKills = flag.Int("cluster.kills", envInt("STATEFUN_BENCH_CLUSTER_KILLS", 10),
		"BenchmarkClusterFailover: failures of each kind, one node at a time, in turn")
	flagFailoverKinds = flag.String("cluster.failures", envStr("STATEFUN_BENCH_CLUSTER_FAILURES", "down,txn,back,zombie,term,leave"),
		"BenchmarkClusterFailover: the kinds of failure to measure, comma-separated (down, txn, back, zombie, term, leave)")
	flagFailoverRate = flag.Int("cluster.load", envInt("STATEFUN_BENCH_CLUSTER_LOAD", 200),
		"BenchmarkClusterFailover: messages per second of the load that runs through the failures")
	flagFailoverProbe = flag.Duration("cluster.probe", envDur("STATEFUN_BENCH_CLUSTER_PROBE", 0),
		"BenchmarkClusterFailover: --cluster-peer-probe-interval of the nodes (0: the runtime's default)")
	flagFailoverDownAfter = flag.Duration("cluster.downafter", envDur("STATEFUN_BENCH_CLUSTER_DOWNAFTER", 0),
		"BenchmarkClusterFailover: --cluster-peer-down-after of the nodes (0: the runtime's default; negative: no probing)")
)

// failoverKinds are the failures BenchmarkClusterFailover measures.
var failoverKinds = map[string]string{
	"down":   "SIGKILL, the node left down",
	"txn":    "SIGKILL while its transaction is open, the node left down",
	"back":   "SIGKILL, the node started again at once",
	"zombie": "SIGSTOP until its partitions serve elsewhere, then SIGCONT",
	"term":   "SIGTERM, the node started again at once (a rolling restart)",
	"leave":  "SIGTERM with --cluster-leave-on-stop, the node left down",
}

// BenchmarkClusterFailover measures, at the default timeouts (a 45 s
// session, 3 s heartbeats, 40 s transactions, the failure detector's 500 ms
// probes and 2 s down-after time), how long one of three nodes' failure
// keeps its keys from being served: from the signal until every key's new
// output is visible to a read_committed consumer and a state API read of a
// key the node owned answers with it. Each kind of failure
// (-cluster.failures) gets a cluster of its own (kfake child, the
// official-SDK counter, three cnode children, P = -cluster.partitions)
// and -cluster.kills failures, one node at a time in turn, with a paced
// load (-cluster.load messages/s over 256 keys) through the others all
// along. At each failure the benchmark sends one message to each of four
// probe keys per partition through a survivor; failover-s is the time
// until the last of their counts is on the output and a read of one of the
// failed node's keys returns it. Between failures the node is brought
// back and the cluster settles (not measured). Every key's counts on the
// output are checked to be 1..n, each once, and n between the messages
// acknowledged and attempted.
func BenchmarkClusterFailover(b *testing.B) {
	fnAddr, fnPID := startServer(b, "kcounter")
	for _, kind := range strings.Split(*flagFailoverKinds, ",") {
		kind = strings.TrimSpace(kind)
		if failoverKinds[kind] == "" {
			b.Fatalf("bench: -cluster.failures %q: unknown kind %q", *flagFailoverKinds, kind)
		}
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				runFailovers(b, "http://"+fnAddr+"/statefun", fnPID, kind)
			}
		})
	}
}

// failoverRun is one cluster of three nodes under a failure kind.
type failoverRun struct {
	b      *testing.B
	kind   string
	c      *benchCluster
	out    *outputTail
	load   *failoverLoad
	probes []string // four ids in each partition
	web    *http.Client
	admin  *kgo.Client // of the application's Kafka
}

// failover is one measured failure.
type failover struct {
	took    time.Duration
	removed float64 // nodes the survivors removed from the group
	moved   bool    // the survivors were assigned partitions
	exited  bool    // a zombie exited when it resumed (fenced)
}

func runFailovers(b *testing.B, fnURL string, fnPID int, kind string) {
	b.StopTimer()
	tweak := func(c *clusterconfig.Config) {
		c.LeaveOnStop = kind == "leave"
		c.PeerProbeInterval, c.PeerDownAfter = *flagFailoverProbe, *flagFailoverDownAfter
	}
	r := &failoverRun{b: b, kind: kind, web: &http.Client{Timeout: 5 * time.Second}}
	r.c = startBenchClusterWith(b, fnURL, fnPID, 3, "failover-"+kind, tweak)
	r.out = tailOutput(b, r.c.brokers)
	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(r.c.brokers, ",")...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(admin.Close)
	r.admin = admin
	for i := 0; len(r.probes) < 4**flagClusterP; i++ {
		id := "probe-" + strconv.Itoa(i)
		p := address.Partition(id, *flagClusterP)
		n := 0
		for _, q := range r.probes {
			if address.Partition(q, *flagClusterP) == p {
				n++
			}
		}
		if n < 4 {
			r.probes = append(r.probes, id)
		}
	}
	r.load = startFailoverLoad(b, *flagFailoverRate, ingresses(r.c.nodes))
	var runs []failover
	for i := range *flagFailoverKills {
		f := r.fail(i % len(r.c.nodes))
		runs = append(runs, f)
		resumed := ""
		if kind == "zombie" {
			resumed = "; on SIGCONT it rejoined"
			if f.exited {
				resumed = "; on SIGCONT it exited, fenced"
			}
		}
		b.Logf("%s %d (node-%d): %.2f s; the survivors removed %v nodes, took partitions over: %v%s", kind, i+1, i%len(r.c.nodes), f.took.Seconds(), f.removed, f.moved, resumed)
	}
	acked, attempted := r.load.halt()
	for _, id := range r.probes {
		acked[id], attempted[id] = r.out.probes(id)
	}
	r.out.check(b, acked, attempted, 2*time.Minute)

	var took []float64
	removed, moved := 0.0, 0
	for _, f := range runs {
		took = append(took, f.took.Seconds())
		removed += f.removed
		if f.moved {
			moved++
		}
	}
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2], "p50-s")
	b.ReportMetric(took[len(took)-1], "max-s")
	b.Logf("%s (%s), %d failures: failover p50 %.2f s, max %.2f s (min %.2f s); the survivors removed %v nodes and took partitions over in %d of them",
		kind, failoverKinds[kind], len(runs), took[len(took)/2], took[len(took)-1], took[0], removed, moved)
}

// fail fails node v as r.kind says, measures until its keys serve again,
// and brings the cluster back to three serving nodes.
func (r *failoverRun) fail(v int) failover {
	b := r.b
	var survivors []*clusterNodeProc
	for i, n := range r.c.nodes {
		if i != v {
			survivors = append(survivors, n)
		}
	}
	victim := r.c.nodes[v]
	r.load.sendTo(ingresses(survivors))
	time.Sleep(*flagClusterKillAfter)
	moved := r.ownedProbe(victim)
	before := r.c.scrape(b, survivors)

	b.StartTimer()
	start := time.Now()
	switch r.kind {
	case "down", "back":
		if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
	case "txn":
		r.killInTransaction(v)
	case "zombie":
		if err := syscall.Kill(victim.pid, syscall.SIGSTOP); err != nil {
			b.Fatal(err)
		}
	case "term", "leave":
		if err := syscall.Kill(victim.pid, syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
	}
	if r.kind == "back" || r.kind == "term" {
		r.c.restart(b, v)
	}
	want := r.sendProbes(survivors[0])
	f := failover{took: r.waitServed(survivors[0], want, moved, 2*time.Minute).Sub(start)}
	b.StopTimer()

	after := r.c.scrape(b, survivors)
	f.removed = sumAll(after, "statefun_cluster_peers_removed_total") - sumAll(before, "statefun_cluster_peers_removed_total")
	f.moved = sumAll(after, "statefun_cluster_rebalances_total", `kind="assigned"`) > sumAll(before, "statefun_cluster_rebalances_total", `kind="assigned"`)
	switch r.kind {
	case "down", "txn", "leave":
		r.c.restart(b, v)
	case "zombie":
		if err := syscall.Kill(victim.pid, syscall.SIGCONT); err != nil {
			b.Fatal(err)
		}
		// Fenced with a transaction open, it exits 1 (and is started
		// again, as by a supervisor); between transactions it rejoins.
		select {
		case <-victim.exited:
			f.exited = true
			r.c.restart(b, v)
		case <-time.After(5 * time.Second):
		}
	}
	r.c.waitServing(b, r.c.nodes, 2*time.Minute)
	r.load.sendTo(ingresses(r.c.nodes))
	return f
}

// killInTransaction kills node v with SIGKILL as soon as its transaction
// coordinator says it has a transaction open (a transaction lasts a few
// milliseconds of each commit interval here, so a kill at a random moment
// seldom finds one): the case in which the new owners' restores wait for
// the dead node's transaction to end.
func (r *failoverRun) killInTransaction(v int) {
	b := r.b
	adm := kadm.NewClient(r.admin)
	tid := "failover-" + r.kind + "-node-" + strconv.Itoa(v)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds, err := adm.DescribeTransactions(b.Context(), tid)
		if err == nil && ds[tid].State == "Ongoing" {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("bench: %s had no transaction open within 30s", tid)
		}
	}
	if err := syscall.Kill(r.c.nodes[v].pid, syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
}

// ownedProbe returns a probe id whose partition n serves: asked with the
// hop header, only the owner answers for it.
func (r *failoverRun) ownedProbe(n *clusterNodeProc) string {
	for _, id := range r.probes {
		req, err := http.NewRequest(http.MethodGet, n.admin+"/state/"+kafkaCounterFn+"/"+id+"/"+kafkaCountName, nil)
		if err != nil {
			r.b.Fatal(err)
		}
		req.Header.Set("Statefun-Forwarded", "bench")
		resp, err := r.web.Do(req)
		if err != nil {
			r.b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
			return id
		}
	}
	r.b.Fatalf("bench: %s serves none of the probe keys", n.admin)
	return ""
}

// sendProbes sends one message to each probe id through n and returns the
// count each id's message makes.
func (r *failoverRun) sendProbes(n *clusterNodeProc) map[string]int {
	want := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range r.probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Until acknowledged: a message sent twice only makes the
			// count wanted a lower bound.
			for {
				r.out.tried(id)
				if err := postMessage(r.web, n.ingress+"/"+kafkaCounterFn+"/"+id); err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			want[id] = r.out.sent(id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return want
}

// waitServed waits until every probe id's count in want is on the output
// and a read of moved through n returns its count, and returns when the
// later of the two happened. Reads start every 50 ms, each on its own: a
// read sent while the owner is a stopped process waits for the forward's
// budget, and would hide when a read sent later is answered.
func (r *failoverRun) waitServed(n *clusterNodeProc, want map[string]int, moved string, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	readAt := make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			go func() {
				if v, ok := r.readCount(n, moved); ok && v >= int64(want[moved]) {
					select {
					case readAt <- time.Now():
					default:
					}
				}
			}()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var read, visible time.Time
	for read.IsZero() || visible.IsZero() {
		select {
		case read = <-readAt:
		case <-time.After(20 * time.Millisecond):
		}
		if visible.IsZero() {
			visible = r.out.visible(want)
		}
		if time.Now().After(deadline) {
			r.b.Fatalf("bench: the probe keys not served within %v of the failure (a read of %s answered: %v, every count on the output: %v)", timeout, moved, !read.IsZero(), !visible.IsZero())
		}
	}
	if read.After(visible) {
		return read
	}
	return visible
}

// readCount reads id's count through n's state API.
func (r *failoverRun) readCount(n *clusterNodeProc, id string) (int64, bool) {
	c, err := stateclient.New(n.admin, stateclient.WithHTTPClient(r.web))
	if err != nil {
		return 0, false
	}
	ns, typ, _ := strings.Cut(kafkaCounterFn, "/")
	v, err := c.Get(context.Background(), stateclient.Address{Namespace: ns, Type: typ, ID: id}, kafkaCountName, "text/plain")
	if err != nil {
		return 0, false
	}
	n64, err := strconv.ParseInt(strings.TrimSpace(string(v.Bytes)), 10, 64)
	return n64, err == nil
}

// postMessage sends one message through a playground ingress URL.
func postMessage(web *http.Client, url string) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("0"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", kafkaStampType)
	resp, err := web.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

// outputTail reads bench-out read_committed in the background: the counts
// seen for each id, and the messages the benchmark acknowledged to each.
type outputTail struct {
	mu     sync.Mutex
	counts map[string][]int       // in arrival order
	at     map[string][]time.Time // when each was read
	acked  map[string]int         // probe messages acknowledged, by id
	tries  map[string]int         // probe messages attempted, by id
}

func tailOutput(b *testing.B, brokers string) *outputTail {
	o := &outputTail{counts: map[string][]int{}, at: map[string][]time.Time{}, acked: map[string]int{}, tries: map[string]int{}}
	stop, err := kafkatail.Start(strings.Split(brokers, ","), kafkaOutTopic, 50*time.Millisecond, func(r *kgo.Record, at time.Time) {
		n, _, _ := strings.Cut(string(r.Value), " ")
		if c, err := strconv.Atoi(n); err == nil {
			o.mu.Lock()
			o.counts[string(r.Key)] = append(o.counts[string(r.Key)], c)
			o.at[string(r.Key)] = append(o.at[string(r.Key)], at)
			o.mu.Unlock()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return o
}

// sent counts one more probe message acknowledged for id and returns the
// count it makes.
func (o *outputTail) sent(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acked[id]++
	return o.acked[id]
}

// tried counts one more probe message attempted for id.
func (o *outputTail) tried(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tries[id]++
}

// probes returns the probe messages acknowledged and attempted for id.
func (o *outputTail) probes(id string) (acked, attempted int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked[id], o.tries[id]
}

// max is the highest count of id seen.
func (o *outputTail) max(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Max(append([]int{0}, o.counts[id]...))
}

// visible returns when the last of the counts in want was first read, or
// the zero time while one is missing.
func (o *outputTail) visible(want map[string]int) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	var last time.Time
	for id, c := range want {
		i := slices.IndexFunc(o.counts[id], func(n int) bool { return n >= c })
		if i < 0 {
			return time.Time{}
		}
		if o.at[id][i].After(last) {
			last = o.at[id][i]
		}
	}
	return last
}

// check waits until every id's count reaches acked, then checks each id's
// counts are 1..n each once with n at most attempted.
func (o *outputTail) check(b *testing.B, acked, attempted map[string]int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		short := 0
		for id, n := range acked {
			if o.max(id) < n {
				short++
			}
		}
		if short == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Errorf("bench: %d keys' counts below their acknowledged messages %v after the load stopped", short, timeout)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // what is still on its way shows as an extra count
	o.mu.Lock()
	defer o.mu.Unlock()
	dups, gaps, over := 0, 0, 0
	for id, cs := range o.counts {
		seen := map[int]int{}
		top := 0
		for _, c := range cs {
			seen[c]++
			top = max(top, c)
		}
		for c := 1; c <= top; c++ {
			switch seen[c] {
			case 0:
				gaps++
			case 1:
			default:
				dups++
			}
		}
		if top > attempted[id] {
			over++
		}
	}
	if dups+gaps+over > 0 {
		b.Errorf("bench: the output held %d duplicate counts, %d missing ones, and %d keys counted past their messages; want none", dups, gaps, over)
	}
}

// failoverLoad sends messages to the load keys at a paced rate through a
// set of ingresses, counting per id those attempted and acknowledged.
type failoverLoad struct {
	mu        sync.Mutex
	targets   []string
	acked     map[string]int
	attempted map[string]int
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startFailoverLoad(b *testing.B, rate int, targets []string) *failoverLoad {
	l := &failoverLoad{targets: targets, acked: map[string]int{}, attempted: map[string]int{}, stop: make(chan struct{})}
	web := &http.Client{Timeout: 5 * time.Second}
	const senders = 8
	for w := range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			t := time.NewTicker(time.Duration(senders) * time.Second / time.Duration(max(rate, 1)))
			defer t.Stop()
			for i := w; ; i += senders {
				select {
				case <-l.stop:
					return
				case <-t.C:
				}
				id := "load-" + strconv.Itoa(i%256)
				l.mu.Lock()
				target := l.targets[i%len(l.targets)]
				l.attempted[id]++
				l.mu.Unlock()
				if err := postMessage(web, target+id); err == nil {
					l.mu.Lock()
					l.acked[id]++
					l.mu.Unlock()
				}
			}
		}()
	}
	b.Cleanup(func() { l.halt() })
	return l
}

// sendTo makes the load go through targets from now on.
func (l *failoverLoad) sendTo(targets []string) {
	l.mu.Lock()
	l.targets = targets
	l.mu.Unlock()
}

// halt stops the load and returns its counts.
func (l *failoverLoad) halt() (acked, attempted map[string]int) {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	acked, attempted = map[string]int{}, map[string]int{}
	for id, n := range l.acked {
		acked[id] = n
	}
	for id, n := range l.attempted {
		attempted[id] = n
	}
	return acked, attempted
}
