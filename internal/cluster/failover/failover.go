// Package failover notices a node of the application that died and moves
// its partitions at once, instead of after the consumer group's session
// timeout (45 s by default): docs/explanation/cluster.md, "Failure detection".
//
// Every node runs a Detector. It probes the admin URL (GET /healthz) of
// each other node that owns partitions, as the member records name it,
// every probe interval. A node that answers no probe for the down-after
// time is judged down, unless Kafka shows it at work: its transactional
// id's state (DescribeTransactions) changed since its first unanswered
// probe, so it commits transactions and is only cut off from its peers.
// A node judged down is then removed:
//
//  1. its open transaction, if it has one, is aborted by bumping the
//     producer epoch of its transactional id (InitProducerID, as its own
//     restart would do): the new owners' restores wait until no
//     transaction is open on the changelog partition, which would
//     otherwise take the transaction timeout;
//  2. its static membership is removed from the group (LeaveGroup with its
//     instance id and the member id it was seen with, KIP-345), so the
//     group rebalances now;
//  3. this node rejoins the group at once (rather than at its next
//     heartbeat), so that the rebalance completes quickly.
//
// Every surviving node does this; whichever comes second finds the node
// gone (or its epoch bumped) and does nothing more. The fencing by
// generation and epoch that keeps a zombie from committing is Kafka's and
// stays as it is: a removed node that was only stalled finds its
// transaction fenced or its membership gone when it resumes.
//
// False positives are bounded: a node removed while it was alive rejoins
// the group by itself, and is not removed again until it has answered a
// probe; a node that reaches none of two or more peers removes none of
// them (it is more likely the one cut off); and a node that stopped
// cleanly (its member record withdrawn) is not probed: it keeps its
// partitions for its restart, as static membership intends.
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/members"
)

// Config configures a Detector.
type Config struct {
	// Cluster is the node's validated configuration: its node id, the
	// application (group, transactional ids), the probe interval and the
	// down-after time.
	Cluster *clusterconfig.Config
	// Members returns the current member records by node id (the admin
	// URLs to probe).
	Members func() map[string]members.Member
	// Client is a Kafka client of the application's brokers (not the
	// session's: a removal must not wait for a transaction). Its
	// transaction timeout is the one a fence names.
	Client *kgo.Client
	// Rejoin makes this node's group member rejoin the group at once.
	Rejoin func()
	// Probe, if set, replaces the HTTP probe (tests): nil when the node
	// at adminURL answered.
	Probe func(ctx context.Context, adminURL string) error
	// Logger receives the detector's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, if not nil, receives the detector's collectors.
	Metrics prometheus.Registerer

	// ops replaces Kafka (tests).
	ops groupOps
}

// Detector probes the other nodes and removes a dead one from the group.
// Start runs it; Stop ends it.
type Detector struct {
	cfg       Config
	log       *slog.Logger
	ops       groupOps
	interval  time.Duration
	probeWait time.Duration // one probe's timeout
	j         *judge
	http      *http.Client
	m         *detectorMetrics

	// Owned by loop's goroutine.
	runs     map[string]*runInfo // what Kafka said of a peer when its run began
	inflight map[string]bool
	owners   map[string]string // node id → member id, from the last look at the group
	urls     map[string]string // node id → admin URL of the peers probed
	cutLog   bool              // logged that this node reaches no peer

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// runInfo is what the detector noted of a peer when its run of failed
// probes began.
type runInfo struct {
	memberID string
	txn      txnState
	txnErr   error
	working  bool // logged that it answers no probe but works in Kafka
}

// probeResult is one probe's outcome.
type probeResult struct {
	node  string
	start time.Time
	err   error
}

// New checks cfg and returns a detector; nothing runs before Start. It
// returns nil, nil when the probing is turned off (a negative
// PeerDownAfter).
func New(cfg Config) (*Detector, error) {
	if cfg.Cluster == nil || cfg.Members == nil || cfg.Rejoin == nil || (cfg.Client == nil && cfg.ops == nil) {
		return nil, errors.New("failover: Config.Cluster, Members, Client and Rejoin are required")
	}
	downAfter := cfg.Cluster.PeerDownAfterOrDefault()
	if downAfter < 0 {
		return nil, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	interval := cfg.Cluster.PeerProbeIntervalOrDefault()
	d := &Detector{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.Cluster.NodeID),
		ops:      cfg.ops,
		interval: interval,
		// Two probes fit in the down-after time, and a probe never waits
		// past a second: a healthy node answers in milliseconds.
		probeWait: min(downAfter/2, time.Second),
		j:         newJudge(downAfter),
		m:         newDetectorMetrics(cfg.Metrics),
		runs:      map[string]*runInfo{},
		inflight:  map[string]bool{},
		done:      make(chan struct{}),
	}
	if d.ops == nil {
		timeout, _ := cfg.Client.OptValue(kgo.TransactionTimeout).(time.Duration)
		d.ops = &kafkaOps{cfg: cfg.Cluster, cl: cfg.Client, adm: kadm.NewClient(cfg.Client), txnTimeout: timeout}
	}
	if cfg.Probe == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// One kept-alive connection per peer carries every probe.
		tr.MaxIdleConnsPerHost = 1
		d.http = &http.Client{Transport: tr}
	}
	return d, nil
}

// Start runs the detector until Stop.
func (d *Detector) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go d.probeLoop(ctx)
}

// Stop ends the detector and waits for it: a node that is stopping
// removes nobody. Safe to call on a nil Detector and more than once.
func (d *Detector) Stop() {
	if d == nil || d.cancel == nil {
		return
	}
	d.once.Do(func() {
		d.cancel()
		<-d.done
		if d.http != nil {
			d.http.CloseIdleConnections()
		}
	})
}

// probeLoop probes every interval, and acts on what the probes tell.
func (d *Detector) probeLoop(ctx context.Context) {
	defer close(d.done)
	results := make(chan probeResult)
	var probes sync.WaitGroup
	defer probes.Wait()
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-results:
			delete(d.inflight, r.node)
			d.observe(ctx, r)
			d.removeDue(ctx)
		case <-t.C:
			d.tick(ctx, results, &probes)
		}
	}
}

// tick looks at the group, starts a probe of each peer that owns
// partitions (unless one is still under way), and removes the peers that
// are due.
func (d *Detector) tick(ctx context.Context, results chan<- probeResult, probes *sync.WaitGroup) {
	lctx, cancel := context.WithTimeout(ctx, d.interval)
	owners, err := d.ops.owners(lctx)
	cancel()
	if err != nil {
		d.log.Debug("cluster: failover: reading the group", "err", err)
		return
	}
	d.owners = owners
	records := d.cfg.Members()
	urls := map[string]string{}
	for node := range owners {
		if m, ok := records[node]; ok && node != d.cfg.Cluster.NodeID {
			urls[node] = m.AdminURL
		}
	}
	d.urls = urls
	if d.j.keep(urls) {
		// Another node removed a peer this one found down: the group
		// rebalances, and waits for this node's member to rejoin.
		d.cfg.Rejoin()
	}
	for node := range d.runs {
		if _, ok := urls[node]; !ok {
			delete(d.runs, node)
		}
	}
	for node, url := range urls {
		if d.inflight[node] {
			continue
		}
		d.inflight[node] = true
		probes.Add(1)
		go func() {
			defer probes.Done()
			start := time.Now()
			err := d.probe(ctx, url)
			select {
			case results <- probeResult{node: node, start: start, err: err}:
			case <-ctx.Done():
			}
		}()
	}
	d.m.failing.Set(float64(d.j.failing()))
	if cut := d.j.cutOff(); cut != d.cutLog {
		d.cutLog = cut
		if cut {
			d.log.Warn("cluster: failover: this node reaches none of its peers' admin URLs; it removes none of them from the group, since the fault is more likely on its side", "peers", len(urls))
		}
	}
	d.removeDue(ctx)
}

// removeDue removes the peers the judge finds due.
func (d *Detector) removeDue(ctx context.Context) {
	for _, node := range d.j.due(time.Now()) {
		d.remove(ctx, node, d.urls[node])
	}
}

// probe asks the node at adminURL whether it is alive: any HTTP answer
// below 500 says so (the admin listener serves /healthz without
// authentication); a 5xx is what a proxy in front of a dead node answers.
func (d *Detector) probe(ctx context.Context, adminURL string) error {
	ctx, cancel := context.WithTimeout(ctx, d.probeWait)
	defer cancel()
	if d.cfg.Probe != nil {
		return d.cfg.Probe(ctx, adminURL)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(adminURL, "/")+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("GET /healthz: %s", resp.Status)
	}
	return nil
}

// observe feeds a probe's outcome to the judge; at the start of a run it
// notes the peer's member id and transaction state, to tell later whether
// it made progress.
func (d *Detector) observe(ctx context.Context, r probeResult) {
	if _, ok := d.owners[r.node]; !ok {
		return // no longer probed
	}
	if !d.j.probed(r.node, r.start, r.err == nil) {
		if r.err == nil {
			delete(d.runs, r.node)
		}
		return
	}
	d.log.Info("cluster: failover: a node does not answer its admin URL", "peer", r.node, "err", r.err)
	d.runs[r.node] = d.look(ctx, r.node)
}

// look notes how node stands in the group and in Kafka's transactions.
func (d *Detector) look(ctx context.Context, node string) *runInfo {
	ri := &runInfo{memberID: d.owners[node]}
	lctx, cancel := context.WithTimeout(ctx, d.interval)
	defer cancel()
	ri.txn, ri.txnErr = d.ops.txn(lctx, node)
	return ri
}

// remove removes node, judged down, from the group, unless it came back or
// Kafka shows it at work since its run began.
func (d *Detector) remove(ctx context.Context, node, url string) {
	ri := d.runs[node]
	if ri == nil {
		ri = d.look(ctx, node)
		d.runs[node] = ri
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	owners, err := d.ops.owners(ctx)
	if err != nil {
		d.log.Warn("cluster: failover: reading the group to remove a node that does not answer; trying again", "peer", node, "err", err)
		return
	}
	mid, ok := owners[node]
	switch {
	case !ok:
		// Another node removed it, or it left; this node's member
		// rejoins too, so that the rebalance does not wait for its
		// heartbeat.
		d.j.markRemoved(node)
		d.cfg.Rejoin()
		return
	case mid != ri.memberID:
		d.log.Info("cluster: failover: a node that did not answer joined the group again (a new process); not removing it", "peer", node)
		d.j.progressed(node, time.Now())
		d.runs[node] = d.look(ctx, node)
		return
	}
	st, err := d.ops.txn(ctx, node)
	if err == nil && ri.txnErr == nil && st != ri.txn {
		if !ri.working {
			ri.working = true
			d.log.Warn("cluster: failover: a node answers no probe at its admin URL but its transactions progress in Kafka; not removing it (check the network between the nodes)", "peer", node, "url", url)
		}
		d.j.progressed(node, time.Now())
		ri.txn = st
		return
	}
	fenced := false
	if err != nil {
		// Not known: bump whatever epoch the id has.
		st = txnState{producerID: -1, epoch: -1}
	}
	if err != nil || st.open() {
		// Unknown, or open: abort it, or the new owners' restores wait
		// for its timeout.
		if ferr := d.ops.fence(ctx, node, st); ferr != nil {
			d.log.Warn("cluster: failover: could not abort the open transaction of a node that does not answer; its partitions' restores wait for its transaction timeout", "peer", node, "err", errors.Join(err, ferr))
		} else {
			fenced = err == nil
		}
	}
	removed, gone, err := d.ops.leave(ctx, node, mid)
	if err != nil {
		d.log.Warn("cluster: failover: could not remove a node that does not answer from the group; trying again", "peer", node, "err", err)
		return
	}
	if !gone {
		d.log.Info("cluster: failover: a node that did not answer joined the group again (a new process); not removing it", "peer", node)
		d.j.progressed(node, time.Now())
		return
	}
	d.j.markRemoved(node)
	d.cfg.Rejoin()
	if !removed {
		return // another node did, a moment before
	}
	d.m.removed.Inc()
	d.log.Warn("cluster: failover: removed a node that answered no probe from the group; its partitions move to the others now",
		"peer", node, "url", url, "down_after", d.j.downAfter, "aborted_open_transaction", fenced)
}

// detectorMetrics are the detector's collectors.
type detectorMetrics struct {
	failing prometheus.Gauge
	removed prometheus.Counter
}

func newDetectorMetrics(reg prometheus.Registerer) *detectorMetrics {
	m := &detectorMetrics{
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "statefun_cluster_peers_unanswering",
			Help: "Other nodes owning partitions whose admin URL answers no probe of this node at the moment.",
		}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_cluster_peers_removed_total",
			Help: "Nodes this node removed from the consumer group because they answered no probe for the down-after time and made no progress in Kafka.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.failing, m.removed)
	}
	return m
}
