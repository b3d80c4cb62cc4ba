package members

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/meta"
)

// watch starts a Watcher of cfg's application, closed when t ends.
func watch(t *testing.T, cfg *clusterconfig.Config) *Watcher {
	t.Helper()
	w, err := Watch(ctx(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// forge writes a member record into the meta topic as anyone who may
// write it can: value m (nil: a tombstone) with headers.
func forge(t *testing.T, cfg *clusterconfig.Config, node string, m *Member, headers ...kgo.RecordHeader) {
	t.Helper()
	cl, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Key: []byte(KeyPrefix + node), Headers: headers}
	if m != nil {
		if rec.Value, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := meta.Write(ctx(t), cfg.MetaTopic(), cl.Opts, rec); err != nil {
		t.Fatal(err)
	}
}

// mark publishes node's genuine record and waits until w has it: every
// record written before it has been read by then.
func mark(t *testing.T, w *Watcher, cfg *clusterconfig.Config, node string) {
	t.Helper()
	if err := Publish(ctx(t), cfg, time.Now(), NewIncarnation()); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx(t), func(m map[string]Member) bool { _, ok := m[node]; return ok }); err != nil {
		t.Fatal(err)
	}
}

// A record written without the cluster secret is never trusted: neither a
// new node's nor one that claims a real node's id (which keeps its
// genuine record), nor one signed with another secret, nor a signed one
// whose URL is not http(s). A replay of a node's older genuine record does
// not displace the newer one, and a tombstone without the secret's MAC
// deletes nothing. Distrusted names the record that was refused.
func TestForgedMemberRecordsAreNotTrusted(t *testing.T) {
	_, cfg := application(t, 2)
	w := watch(t, cfg("node-a"))
	old := time.Now().Add(-time.Hour)
	if err := Publish(ctx(t), cfg("node-b"), old, "b-old"); err != nil {
		t.Fatal(err)
	}
	mark(t, w, cfg("node-a"), "node-a")
	genuineA, _ := w.Lookup("node-a")
	if err := Publish(ctx(t), cfg("node-b"), time.Now(), "b-new"); err != nil {
		t.Fatal(err)
	}

	attacker := "http://attacker.example:8070"
	forge(t, cfg("x"), "node-a", &Member{NodeID: "node-a", AdminURL: attacker, StartedAt: time.Now(), Incarnation: "x1"})
	evil := Member{NodeID: "evil", AdminURL: attacker, StartedAt: time.Now(), Incarnation: "x2"}
	evil.MAC = hex.EncodeToString(evil.sum([]byte("not-the-cluster-secret-not-the-!"), "shop"))
	forge(t, cfg("x"), "evil", &evil)
	ftp := Member{NodeID: "odd", AdminURL: "ftp://odd.statefun:21", StartedAt: time.Now(), Incarnation: "x3"}
	ftp.MAC = hex.EncodeToString(ftp.sum(secret, "shop"))
	forge(t, cfg("x"), "odd", &ftp)
	// The old process's genuine record of node-b, written again.
	replay := Member{NodeID: "node-b", AdminURL: attacker, StartedAt: old.UTC(), Incarnation: "b-old"}
	cfgB := cfg("node-b")
	cfgB.Advertise = attacker
	if err := Publish(ctx(t), cfgB, old, "b-old"); err != nil {
		t.Fatal(err)
	}
	// A goodbye of node-a that nobody with the secret wrote.
	forge(t, cfg("x"), "node-a", nil, kgo.RecordHeader{Key: incarnationHeader, Value: []byte(genuineA.Incarnation)})
	mark(t, w, cfg("node-z"), "node-z")

	if a, ok := w.Lookup("node-a"); !ok || a != genuineA {
		t.Errorf("node-a after forged records and a forged goodbye: %+v %v; want its genuine record %+v", a, ok, genuineA)
	}
	if b, ok := w.Lookup("node-b"); !ok || b.Incarnation != "b-new" || b.AdminURL == replay.AdminURL {
		t.Errorf("node-b after a replay of its old record: %+v %v", b, ok)
	}
	for node, want := range map[string]string{
		"node-a": "is not signed",
		"evil":   "does not verify with this node's cluster secret",
		"odd":    `names the admin URL "ftp://odd.statefun:21", to which no request is sent`,
	} {
		if _, ok := w.Lookup(node); ok && node != "node-a" {
			t.Errorf("%s is trusted: %v", node, w.All())
		}
		if why := w.Distrusted(node); !strings.Contains(why, want) || !strings.Contains(why, "member record at offset ") || !strings.Contains(why, "of shop-meta") {
			t.Errorf("Distrusted(%s) = %q; want it to name the record and say %q", node, why, want)
		}
	}
	if why := w.Distrusted("node-z"); why != "" {
		t.Errorf("Distrusted(node-z) = %q", why)
	}

	// A watcher started now, reading the same topic from its start,
	// trusts the same.
	w2 := watch(t, cfg("node-c"))
	if a, _ := w2.Lookup("node-a"); a != genuineA {
		t.Errorf("a new watcher: node-a %+v", a)
	}
	if _, ok := w2.Lookup("evil"); ok {
		t.Error("a new watcher trusts evil")
	}

	// The genuine goodbye deletes node-a.
	if err := Withdraw(ctx(t), cfg("node-a"), genuineA.Incarnation); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx(t), func(m map[string]Member) bool { _, ok := m["node-a"]; return !ok }); err != nil {
		t.Fatal(err)
	}
}

// Without a cluster secret a watcher trusts a record whose admin URL is a
// loopback name and no other.
func TestWithoutSecretOnlyLoopbackIsTrusted(t *testing.T) {
	_, cfg := application(t, 2)
	plain := func(node, adv string) *clusterconfig.Config {
		c := cfg(node)
		c.Secret, c.Advertise = nil, adv
		return c
	}
	w := watch(t, plain("node-a", "http://127.0.0.1:8070"))
	if err := Publish(ctx(t), plain("far", "http://far.example:8070"), time.Now(), NewIncarnation()); err != nil {
		t.Fatal(err)
	}
	mark(t, w, plain("near", "http://127.0.0.1:8071"), "near")
	if _, ok := w.Lookup("far"); ok || !strings.Contains(w.Distrusted("far"), "not on this machine") {
		t.Errorf("far: trusted %v, distrusted %q", ok, w.Distrusted("far"))
	}
	if m, _ := w.Lookup("near"); m.AdminURL != "http://127.0.0.1:8071" || m.MAC != "" {
		t.Errorf("near: %+v", m)
	}
}

// Keep publishes a node's record again when anything else comes last
// under its key — a record someone forged, the late goodbye of an earlier
// process of the node — so that compaction, which keeps the last record of
// a key, never leaves the meta topic without it. Once Keep stops, a
// withdrawal stands.
func TestKeepRepublishes(t *testing.T) {
	KeepInterval = 0
	t.Cleanup(func() { KeepInterval = 10 * time.Second })
	_, cfg := application(t, 2)
	a := cfg("node-a")
	w := watch(t, a)
	started, inc := time.Now(), NewIncarnation()
	if err := Publish(ctx(t), a, started, inc); err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx(t))
	done := make(chan struct{})
	go func() { defer close(done); w.Keep(kctx, a, started, inc) }()

	// lastIsMine waits until the last record under node-a's key is its
	// own, read after offset after, and returns its offset.
	lastIsMine := func(after int64) int64 {
		t.Helper()
		var off int64
		err := w.waitLocked(ctx(t), func() bool {
			off = w.lastOff["node-a"]
			return off > after && off == w.heldOff["node-a"] && w.members["node-a"].Incarnation == inc
		})
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	off := lastIsMine(-1)
	forge(t, cfg("x"), "node-a", &Member{NodeID: "node-a", AdminURL: "http://attacker.example:8070", StartedAt: time.Now(), Incarnation: "x"})
	off = lastIsMine(off)
	// An earlier process's goodbye, genuine but late.
	if err := Withdraw(ctx(t), a, "an-earlier-process"); err != nil {
		t.Fatal(err)
	}
	off = lastIsMine(off)

	stop()
	<-done
	if err := Withdraw(ctx(t), a, inc); err != nil {
		t.Fatal(err)
	}
	mark(t, w, cfg("node-z"), "node-z")
	w.mu.Lock()
	_, held := w.members["node-a"]
	last := w.lastOff["node-a"]
	w.mu.Unlock()
	if held || last <= off {
		t.Errorf("node-a after its withdrawal with Keep stopped: held %v, last record at %d (its own at %d)", held, last, off)
	}
}

// A node's genuine record written again after a later process of the node
// published its own — an incarnation held before, or one that started well
// before — is a replay and ignored; a later process whose clock stepped
// back a little is not.
func TestReplayedRecordsAreIgnored(t *testing.T) {
	_, cfg := application(t, 2)
	w := watch(t, cfg("node-a"))
	b := cfg("node-b")
	now := time.Now()
	if err := Publish(ctx(t), b, now, "first"); err != nil {
		t.Fatal(err)
	}
	// The next process's clock is 5 s behind the first's.
	if err := Publish(ctx(t), b, now.Add(-5*time.Second), "second"); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx(t), func(m map[string]Member) bool { return m["node-b"].Incarnation == "second" }); err != nil {
		t.Fatalf("a later process with a clock 5 s behind: %v, %+v", err, w.All())
	}
	// The first's record again, and one of a process an hour older.
	if err := Publish(ctx(t), b, now, "first"); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx(t), b, now.Add(-time.Hour), "ancient"); err != nil {
		t.Fatal(err)
	}
	mark(t, w, cfg("node-z"), "node-z")
	if m, _ := w.Lookup("node-b"); m.Incarnation != "second" {
		t.Errorf("node-b after replays: %+v, want the second process's record", m)
	}
}
