// Package members tells the nodes of an application apart: which node owns
// which partition, and at which URL each node's admin listener answers, so
// that a node can forward a state API request to an address's owner
// (docs/explanation/cluster.md, "The state access API on every node").
//
// Ownership comes from Kafka: the consumer group's current assignment of
// the messages topic, read with DescribeGroups (Owners). The URLs come from
// member records a node writes into the meta topic when it starts
// (Publish) and deletes when it stops cleanly (Withdraw); Watch tails them.
// A node killed without Withdraw leaves its record behind; that is
// harmless, since only owners are looked up, and its successor with the
// same node id replaces the record.
//
// Anyone who may write the meta topic can write a record, so a Watcher
// keeps only the records it trusts (docs/explanation/cluster.md, "Trust between
// nodes"): with a cluster secret, those whose MAC verifies under it; without
// one, those whose admin URL is a loopback name. A record that fails is
// never looked up (Distrusted says why), and never displaces a trusted
// record of the same node; neither does a record of an earlier process of
// a node than the latest one trusted (a replay).
package members

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/meta"
	"github.com/statefun-go/statefun/internal/cluster/trust"
)

// KeyPrefix prefixes a member record's key in the meta topic; the node id
// follows.
const KeyPrefix = "member/"

// incarnationHeader carries, on a tombstone, the incarnation it deletes.
const incarnationHeader = "incarnation"

// macHeader carries, on a tombstone, its MAC under the cluster secret.
const macHeader = "mac"

// The MACs of a member record and of its tombstone, each naming the
// format's version: part of the record format.
const (
	recordDomain   = "statefun member record v1"
	withdrawDomain = "statefun member withdrawal v1"
)

// Member is a member record: one running node.
type Member struct {
	// NodeID is the node's id.
	NodeID string `json:"node_id"`
	// AdminURL is the node's advertised admin URL.
	AdminURL string `json:"admin_url"`
	// StartedAt is when the node process started.
	StartedAt time.Time `json:"started_at"`
	// Incarnation tells this process apart from earlier and later
	// processes of the same node id (see NewIncarnation).
	Incarnation string `json:"incarnation"`
	// MAC is the record's HMAC-SHA256 under the cluster secret, in hex
	// (see sum); empty when the node has no secret.
	MAC string `json:"mac,omitempty"`
}

// sum is the MAC of m's fields under secret, in application app: the
// application, node id, admin URL, start time (Unix nanoseconds) and
// incarnation. A record copied from another application with the same
// secret does not verify.
func (m Member) sum(secret []byte, app string) []byte {
	return trust.MAC(secret, recordDomain, app, m.NodeID, m.AdminURL, strconv.FormatInt(m.StartedAt.UnixNano(), 10), m.Incarnation)
}

// withdrawalSum is the MAC of the tombstone that deletes incarnation of
// node.
func withdrawalSum(secret []byte, app, node, incarnation string) []byte {
	return trust.MAC(secret, withdrawDomain, app, node, incarnation)
}

// NewIncarnation returns a fresh random incarnation for a process.
func NewIncarnation() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Publish writes this node's member record (cfg.NodeID, cfg.Advertise,
// startedAt, incarnation) to the meta topic and returns once Kafka has it.
func Publish(ctx context.Context, cfg *clusterconfig.Config, startedAt time.Time, incarnation string) error {
	client, err := cfg.Client()
	if err != nil {
		return err
	}
	m := Member{NodeID: cfg.NodeID, AdminURL: cfg.Advertise, StartedAt: startedAt.UTC(), Incarnation: incarnation}
	if len(cfg.Secret) > 0 {
		m.MAC = hex.EncodeToString(m.sum(cfg.Secret, cfg.AppID))
	}
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := meta.Write(ctx, cfg.MetaTopic(), client.Opts, &kgo.Record{Key: []byte(KeyPrefix + cfg.NodeID), Value: v}); err != nil {
		return fmt.Errorf("members: publishing node %s: %w", cfg.NodeID, err)
	}
	return nil
}

// Withdraw deletes this node's member record (a tombstone), on a clean
// shutdown. The tombstone names the incarnation it deletes, so a late
// Withdraw of an old process does not delete its successor's record
// for readers that saw both (compaction may still drop the successor's
// record later: a node that sees its own record missing publishes again).
func Withdraw(ctx context.Context, cfg *clusterconfig.Config, incarnation string) error {
	client, err := cfg.Client()
	if err != nil {
		return err
	}
	rec := &kgo.Record{Key: []byte(KeyPrefix + cfg.NodeID), Headers: []kgo.RecordHeader{{Key: incarnationHeader, Value: []byte(incarnation)}}}
	if len(cfg.Secret) > 0 {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: macHeader,
			Value: []byte(hex.EncodeToString(withdrawalSum(cfg.Secret, cfg.AppID, cfg.NodeID, incarnation)))})
	}
	if err := meta.Write(ctx, cfg.MetaTopic(), client.Opts, rec); err != nil {
		return fmt.Errorf("members: withdrawing node %s: %w", cfg.NodeID, err)
	}
	return nil
}

// Watcher keeps the current member records of the meta topic that it
// trusts.
type Watcher struct {
	r      *meta.Reader
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	secret []byte // the cluster secret; nil: only loopback admin URLs are trusted
	app    string
	topic  string

	mu      sync.Mutex
	members map[string]Member          // trusted records by node id
	started map[string]time.Time       // the latest StartedAt trusted of each node, kept after a withdrawal
	incs    map[string]map[string]bool // the incarnations of each node ever trusted
	refused map[string]string          // why the last record of a node was not trusted, until one is
	lastOff map[string]int64           // the offset of the last record under each node's key, whatever it was
	heldOff map[string]int64           // the offset of each trusted record held (members)
	changed chan struct{}              // closed and replaced on every change
	err     error                      // why tailing stopped, when it did
}

// Watch reads the member records of the meta topic up to its end, then
// keeps tailing it until Close. The meta topic must exist (topics.Ensure).
func Watch(ctx context.Context, cfg *clusterconfig.Config, log *slog.Logger) (*Watcher, error) {
	if log == nil {
		log = slog.Default()
	}
	client, err := cfg.Client()
	if err != nil {
		return nil, err
	}
	r, err := meta.Open(cfg.MetaTopic(), client.Opts)
	if err != nil {
		return nil, err
	}
	w := &Watcher{r: r, log: log, secret: cfg.Secret, app: cfg.AppID, topic: cfg.MetaTopic(),
		members: map[string]Member{}, started: map[string]time.Time{}, incs: map[string]map[string]bool{}, refused: map[string]string{},
		lastOff: map[string]int64{}, heldOff: map[string]int64{},
		changed: make(chan struct{}), done: make(chan struct{})}
	if err := r.CatchUp(ctx, w.apply); err != nil {
		r.Close()
		return nil, fmt.Errorf("members: %w", err)
	}
	tctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.tail(tctx)
	return w, nil
}

func (w *Watcher) tail(ctx context.Context) {
	defer close(w.done)
	for ctx.Err() == nil {
		if err := w.r.Poll(ctx, w.apply); err != nil && ctx.Err() == nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			w.log.Error("cluster: reading member records stopped", "error", err)
			return
		}
	}
}

// apply folds one meta record into the members.
func (w *Watcher) apply(rec *kgo.Record) {
	k := string(rec.Key)
	if !strings.HasPrefix(k, KeyPrefix) {
		return
	}
	node := strings.TrimPrefix(k, KeyPrefix)
	w.mu.Lock()
	defer w.mu.Unlock()
	// Whatever this record is, it is now the one compaction keeps under
	// the key (Keep).
	w.lastOff[node] = rec.Offset
	defer w.notifyLocked()
	if rec.Value == nil {
		cur, ok := w.members[node]
		if !ok {
			return
		}
		inc, hasInc := header(rec, incarnationHeader)
		if hasInc && inc != cur.Incarnation {
			return // an older process's goodbye
		}
		if w.secret != nil {
			mac, _ := header(rec, macHeader)
			got, err := hex.DecodeString(mac)
			if !hasInc || err != nil || !hmac.Equal(got, withdrawalSum(w.secret, w.app, node, inc)) {
				w.log.Error("cluster: a withdrawal of a member record that does not verify with this node's cluster secret is ignored: it was not written by a node of this application",
					"node", node, "topic", w.topic, "offset", rec.Offset)
				return
			}
		}
		delete(w.members, node)
	} else {
		var m Member
		if err := json.Unmarshal(rec.Value, &m); err != nil || m.NodeID != node {
			w.log.Warn("cluster: an unreadable member record is ignored", "key", k, "offset", rec.Offset)
			return
		}
		if why := w.distrust(m); why != "" {
			w.refused[node] = fmt.Sprintf("its member record at offset %d of %s %s", rec.Offset, w.topic, why)
			w.log.Error("cluster: a member record this node does not trust is ignored; no request is sent to its admin URL",
				"node", node, "admin_url", m.AdminURL, "topic", w.topic, "offset", rec.Offset, "why", why)
			return
		}
		if w.replayed(m) {
			w.log.Warn("cluster: a member record of an earlier process of a node is ignored (a replay, or a late write of that process)",
				"node", node, "admin_url", m.AdminURL, "started_at", m.StartedAt, "incarnation", m.Incarnation, "topic", w.topic, "offset", rec.Offset)
			return
		}
		if m.StartedAt.After(w.started[node]) {
			w.started[node] = m.StartedAt
		}
		if w.incs[node] == nil {
			w.incs[node] = map[string]bool{}
		}
		w.incs[node][m.Incarnation] = true
		w.members[node] = m
		w.heldOff[node] = rec.Offset
		delete(w.refused, node)
	}
}

// notifyLocked wakes the waiters (Wait, Keep) after a record under a
// member key was read.
func (w *Watcher) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// distrust says why m is not to be trusted, or "" when it is: its admin
// URL must be one a node sends requests to, and with a cluster secret its
// MAC must verify; without one, its URL must be a loopback name.
func (w *Watcher) distrust(m Member) string {
	if err := clusterconfig.CheckAdvertise(m.AdminURL); err != nil {
		return fmt.Sprintf("names the admin URL %q, to which no request is sent (%v)", m.AdminURL, err)
	}
	if w.secret == nil {
		if !trust.LoopbackURL(m.AdminURL) {
			return fmt.Sprintf("names the admin URL %s, which is not on this machine, and this node has no cluster secret to authenticate it with (without one only loopback admin URLs are trusted; set %s on every node)",
				m.AdminURL, clusterconfig.SecretSettings)
		}
		return ""
	}
	if m.MAC == "" {
		return "is not signed, and this node has a cluster secret: it was not written by a node of this application that has the secret (give every node the same one)"
	}
	got, err := hex.DecodeString(m.MAC)
	if err != nil || !hmac.Equal(got, m.sum(w.secret, w.app)) {
		return "does not verify with this node's cluster secret: it was not written by a node of this application that has the same secret (give every node the same one)"
	}
	return ""
}

// replayTolerance is how much earlier than the latest process of a node
// another may have started and still be taken for a later one: a node's
// clock may step back between two processes.
const replayTolerance = time.Minute

// replayed reports whether m, a trusted record, is one of an earlier
// process of its node than the latest this watcher trusted: an
// incarnation it held before that is not the one it holds now, or one
// that started well before the latest. Without this, whoever may write
// the meta topic could put a node's old admin URL back.
func (w *Watcher) replayed(m Member) bool {
	cur, held := w.members[m.NodeID]
	if w.incs[m.NodeID][m.Incarnation] && (!held || cur.Incarnation != m.Incarnation) {
		return true
	}
	latest, ok := w.started[m.NodeID]
	return ok && m.StartedAt.Before(latest.Add(-replayTolerance))
}

// header returns the value of rec's header key.
func header(rec *kgo.Record, key string) (string, bool) {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Distrusted says why this node does not trust the last member record it
// read of node, when no trusted record of node came after it; "" when it
// has nothing against node. A request for a partition node owns is not
// sent to it, and the 503 that answers it says this.
func (w *Watcher) Distrusted(node string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused[node]
}

// Lookup returns the trusted member record of node.
func (w *Watcher) Lookup(node string) (Member, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.members[node]
	return m, ok
}

// All returns a copy of the current trusted members by node id.
func (w *Watcher) All() map[string]Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.members)
}

// Wait blocks until ok holds for the current members, ctx ends, or
// tailing stopped (its error).
func (w *Watcher) Wait(ctx context.Context, ok func(map[string]Member) bool) error {
	return w.waitLocked(ctx, func() bool { return ok(maps.Clone(w.members)) })
}

// waitLocked blocks until ok, called with mu held, holds, ctx ends, or
// tailing stopped (its error).
func (w *Watcher) waitLocked(ctx context.Context, ok func() bool) error {
	for {
		w.mu.Lock()
		done, ch, err := ok(), w.changed, w.err
		w.mu.Unlock()
		if done {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-w.done:
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			if err == nil {
				err = errors.New("members: the watcher was closed")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// KeepInterval is the least time between two publications of Keep: a
// displaced record is still in the topic until compaction, so publishing
// it again at once is not needed, and someone writing records under a
// node's key as fast as they can does not make the node write as fast.
var KeepInterval = 10 * time.Second

// Keep publishes this node's record (cfg.NodeID, startedAt, incarnation,
// as Publish did) again whenever the last record under its key is not it:
// a record written by someone else, a late withdrawal of an earlier
// process of the node, or one this node did not trust. Compaction keeps
// only the last record under a key, so a node started later would not
// find this one. It returns when ctx ends or tailing stops; cancel ctx
// before Withdraw, or the withdrawal is answered with a new publication.
func (w *Watcher) Keep(ctx context.Context, cfg *clusterconfig.Config, startedAt time.Time, incarnation string) {
	node := cfg.NodeID
	held := func() bool { return w.members[node].Incarnation == incarnation }
	// Publish wrote the record before Keep: wait until it is read, then
	// until anything comes after it under the key.
	if w.waitLocked(ctx, held) != nil {
		return
	}
	var last time.Time
	for {
		displaced := func() bool { return !held() || w.lastOff[node] > w.heldOff[node] }
		if w.waitLocked(ctx, displaced) != nil {
			return
		}
		if wait := time.Until(last.Add(KeepInterval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		w.log.Warn("cluster: the last record under this node's key in the meta topic is not its member record (see the log for the record); publishing it again",
			"node", cfg.NodeID, "topic", w.topic)
		last = time.Now()
		if err := Publish(ctx, cfg, startedAt, incarnation); err != nil && ctx.Err() == nil {
			w.log.Error("cluster: publishing this node's member record again", "err", err)
		}
	}
}

// Close stops tailing.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
	w.r.Close()
}

// Ownership is the consumer group's current assignment of the messages
// topic.
type Ownership struct {
	// State is the group's state as the coordinator reports it: Stable,
	// PreparingRebalance, CompletingRebalance, Empty or Dead. Outside
	// Stable a partition may be about to move.
	State string
	// Owners maps a partition to the node id it is assigned to. A
	// partition that is not in it has no owner at the moment (a
	// cooperative rebalance is moving it, or no node runs).
	Owners map[int32]string
	// MemberIDs maps the node id of each member that owns a partition to
	// its member id in the group's current generation (a restarted node
	// joins with a new one).
	MemberIDs map[string]string
}

// Owners reads which node owns each partition of the messages topic from
// the consumer group's current assignment (DescribeGroups; each member's
// assignment is decoded as a Kafka consumer protocol assignment). Nodes
// join the group with their node id as static-membership instance id; a
// member without one is not a statefun node, and is an error.
func Owners(ctx context.Context, adm *kadm.Client, cfg *clusterconfig.Config) (*Ownership, error) {
	gs, err := adm.DescribeGroups(ctx, cfg.Group())
	if g, ok := gs[cfg.Group()]; errors.Is(err, kerr.GroupIDNotFound) || ok && errors.Is(g.Err, kerr.GroupIDNotFound) {
		// No node has joined yet (or the group expired after all left).
		return &Ownership{State: "Dead", Owners: map[int32]string{}, MemberIDs: map[string]string{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("members: describing group %s: %w", cfg.Group(), err)
	}
	g, ok := gs[cfg.Group()]
	if !ok {
		return nil, fmt.Errorf("members: group %s was not described", cfg.Group())
	}
	if g.Err != nil {
		return nil, fmt.Errorf("members: describing group %s: %w", cfg.Group(), g.Err)
	}
	o := &Ownership{State: g.State, Owners: map[int32]string{}, MemberIDs: map[string]string{}}
	topic := cfg.MessagesTopic()
	for _, m := range g.Members {
		as, ok := m.Assigned.AsConsumer()
		if !ok {
			if g.ProtocolType != "" && g.ProtocolType != "consumer" {
				return nil, fmt.Errorf("members: group %s has protocol type %q, not a consumer group's: another application uses the group id", cfg.Group(), g.ProtocolType)
			}
			continue // no assignment yet
		}
		for _, t := range as.Topics {
			if t.Topic != topic || len(t.Partitions) == 0 {
				continue
			}
			if m.InstanceID == nil || *m.InstanceID == "" {
				return nil, fmt.Errorf("members: group %s member %s (client %s on %s) has no instance id: it is not a statefun node, yet it is assigned %s", cfg.Group(), m.MemberID, m.ClientID, m.ClientHost, topic)
			}
			for _, p := range t.Partitions {
				o.Owners[p] = *m.InstanceID
			}
			o.MemberIDs[*m.InstanceID] = m.MemberID
		}
	}
	return o, nil
}
