package failover

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/members"
)

// fakeGroup is the group and the transaction coordinator as the detector
// sees them, in memory: it follows the rules of groupOps (a fence or a
// leave of a node that moved on is refused) so that the detector's loop
// runs in a synctest bubble.
type fakeGroup struct {
	mu      sync.Mutex
	members map[string]string // node → member id of the owners
	txns    map[string]txnState
	working map[string]bool // nodes whose transactions progress at every look
	fenced  []string
	left    []string
}

func (g *fakeGroup) owners(context.Context) (map[string]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.members), nil
}

func (g *fakeGroup) txn(_ context.Context, node string) (txnState, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.txns[node]
	if g.working[node] {
		st.start++
		g.txns[node] = st
	}
	return st, nil
}

func (g *fakeGroup) fence(_ context.Context, node string, st txnState) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.txns[node]
	if cur.producerID == st.producerID && cur.epoch == st.epoch {
		g.txns[node] = txnState{producerID: cur.producerID, epoch: cur.epoch + 1, state: "Empty", start: -1}
	}
	g.fenced = append(g.fenced, node)
	return nil
}

func (g *fakeGroup) leave(_ context.Context, node, memberID string) (removed, gone bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur, ok := g.members[node]
	switch {
	case !ok:
		return false, true, nil
	case cur != memberID:
		return false, false, nil
	}
	delete(g.members, node)
	g.left = append(g.left, node)
	return true, true, nil
}

func (g *fakeGroup) result() (fenced, left []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.fenced...), append([]string(nil), g.left...)
}

// peers is the network as the fake probe sees it.
type peers struct {
	mu   sync.Mutex
	down map[string]string // admin URL → "refused" or "hung"
}

func (p *peers) set(url, how string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if how == "" {
		delete(p.down, url)
	} else {
		p.down[url] = how
	}
}

func (p *peers) probe(ctx context.Context, url string) error {
	p.mu.Lock()
	how := p.down[url]
	p.mu.Unlock()
	switch how {
	case "refused":
		return errors.New("connection refused")
	case "hung":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// detectorTest is node "a" of an application whose nodes b and c own
// partitions too, with a 500 ms probe interval and a 2 s down-after time.
type detectorTest struct {
	g       *fakeGroup
	net     *peers
	rejoins atomic.Int64
	d       *Detector

	mu      sync.Mutex
	records map[string]members.Member
}

// members returns the member records the detector reads.
func (dt *detectorTest) members() map[string]members.Member {
	dt.mu.Lock()
	defer dt.mu.Unlock()
	return maps.Clone(dt.records)
}

// withdraw deletes node's member record, as its clean stop does.
func (dt *detectorTest) withdraw(node string) {
	dt.mu.Lock()
	defer dt.mu.Unlock()
	delete(dt.records, node)
}

func newDetectorTest(t *testing.T) *detectorTest {
	dt := &detectorTest{
		g: &fakeGroup{
			members: map[string]string{"a": "a-1", "b": "b-1", "c": "c-1"},
			txns: map[string]txnState{
				"b": {producerID: 7, state: "Empty", start: -1},
				"c": {producerID: 8, epoch: 3, state: "Ongoing", start: 1000},
			},
			working: map[string]bool{},
		},
		net: &peers{down: map[string]string{}},
		records: map[string]members.Member{
			"a": {NodeID: "a", AdminURL: "http://a"}, "b": {NodeID: "b", AdminURL: "http://b"}, "c": {NodeID: "c", AdminURL: "http://c"},
		},
	}
	dt.d = dt.start(t, "a")
	return dt
}

// start runs the detector of node id on the test's group and network.
func (dt *detectorTest) start(t *testing.T, id string) *Detector {
	cfg := &clusterconfig.Config{AppID: "app", NodeID: id, PeerProbeInterval: 500 * time.Millisecond, PeerDownAfter: 2 * time.Second}
	d, err := New(Config{Cluster: cfg, Members: dt.members,
		Rejoin: func() { dt.rejoins.Add(1) }, Probe: dt.net.probe, ops: dt.g,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	t.Cleanup(d.Stop)
	return d
}

// wantNoneRemoved lets the detectors run for d and checks that nobody was
// fenced or removed, for the reason why.
func (dt *detectorTest) wantNoneRemoved(t *testing.T, d time.Duration, why string) {
	t.Helper()
	time.Sleep(d)
	synctest.Wait()
	if fenced, left := dt.g.result(); len(fenced)+len(left) > 0 {
		t.Errorf("fenced %v, left %v; want %s", fenced, left, why)
	}
}

// A node killed (its admin URL refuses connections) is removed after the
// down-after time and one probe interval at most: its open transaction is
// aborted, it leaves the group under the member id it had, and this node
// rejoins at once. Not before the down-after time, and the live peer is
// left alone.
func TestDetectorRemovesAKilledNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		time.Sleep(1200 * time.Millisecond)
		dt.net.set("http://c", "refused")
		killed := time.Now()
		for {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if _, left := dt.g.result(); len(left) > 0 {
				break
			}
			if time.Since(killed) > 10*time.Second {
				t.Fatal("c not removed within 10 s")
			}
		}
		took := time.Since(killed)
		if took < 2*time.Second || took > 2600*time.Millisecond {
			t.Errorf("c removed %v after it stopped answering; want between the down-after time (2 s) and one probe interval more", took)
		}
		fenced, left := dt.g.result()
		if len(fenced) != 1 || fenced[0] != "c" || len(left) != 1 || left[0] != "c" {
			t.Errorf("fenced %v, left %v; want c's open transaction aborted and c removed", fenced, left)
		}
		if dt.rejoins.Load() != 1 {
			t.Errorf("rejoined %d times, want once", dt.rejoins.Load())
		}
		// Nothing more: c owns no partition now, b answers.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if fenced, left := dt.g.result(); len(fenced) != 1 || len(left) != 1 {
			t.Errorf("later: fenced %v, left %v", fenced, left)
		}
	})
}

// Both survivors find the killed node down at about the same time: it is
// removed once, counted once, and both rejoin the group at once.
func TestDetectorsOfTwoSurvivorsRemoveOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		b := dt.start(t, "b")
		dt.net.set("http://c", "refused")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if _, left := dt.g.result(); len(left) != 1 || left[0] != "c" {
			t.Errorf("left %v; want c removed once", left)
		}
		if n := testutil.ToFloat64(dt.d.m.removed) + testutil.ToFloat64(b.m.removed); n != 1 {
			t.Errorf("removals counted by a and b: %v, want 1", n)
		}
		if n := dt.rejoins.Load(); n != 2 {
			t.Errorf("rejoins: %d, want one by each survivor", n)
		}
	})
}

// A stalled node (its admin URL accepts connections and never answers, as
// a process stopped with SIGSTOP does) is removed as a killed one is. One
// without an open transaction is removed without a fence.
func TestDetectorRemovesAStalledNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		time.Sleep(time.Second)
		dt.net.set("http://b", "hung")
		time.Sleep(4 * time.Second)
		synctest.Wait()
		fenced, left := dt.g.result()
		if len(fenced) != 0 || len(left) != 1 || left[0] != "b" {
			t.Errorf("fenced %v, left %v; want b removed, no fence (no open transaction)", fenced, left)
		}
	})
}

// A node that answers no probe but whose transactions progress in Kafka
// is cut off from its peers, not dead: it keeps its partitions.
func TestDetectorSparesANodeWorkingInKafka(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		dt.g.mu.Lock()
		dt.g.working["c"] = true
		dt.g.mu.Unlock()
		dt.net.set("http://c", "refused")
		dt.wantNoneRemoved(t, 20*time.Second, "c left alone: its transactions progress")
		// It stops working: now it is removed.
		dt.g.mu.Lock()
		dt.g.working["c"] = false
		dt.g.mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if _, left := dt.g.result(); len(left) != 1 {
			t.Errorf("left %v; want c removed once its transactions stopped", left)
		}
	})
}

// A node that comes back before the down-after time (a restart) keeps its
// partitions; one that rejoined the group under a new member id while it
// did not answer is not removed at its old run's end.
func TestDetectorSparesANodeThatReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		dt.net.set("http://c", "refused")
		time.Sleep(1500 * time.Millisecond)
		dt.net.set("http://c", "")
		dt.wantNoneRemoved(t, 5*time.Second, "c left alone: it answered again")

		dt.net.set("http://b", "refused")
		time.Sleep(1500 * time.Millisecond)
		dt.g.mu.Lock()
		dt.g.members["b"] = "b-2" // a new process joined under b's node id
		dt.g.txns["b"] = txnState{producerID: 7, epoch: 1, state: "Empty", start: -1}
		dt.g.mu.Unlock()
		dt.wantNoneRemoved(t, time.Second, "b's new process left alone at the old run's end")
	})
}

// A node that reaches neither of its peers removes neither: the fault is
// more likely its own.
func TestDetectorCutOffRemovesNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		dt.net.set("http://b", "refused")
		dt.net.set("http://c", "refused")
		dt.wantNoneRemoved(t, 20*time.Second, "nobody removed by a node cut off from all its peers")
	})
}

// A node that stopped cleanly withdrew its member record: it is not
// probed, and keeps its partitions for its restart (static membership).
func TestDetectorLeavesAWithdrawnNodeAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dt := newDetectorTest(t)
		dt.withdraw("c")
		dt.net.set("http://c", "refused")
		dt.wantNoneRemoved(t, 20*time.Second, "c, which withdrew its record, left alone")
	})
}
