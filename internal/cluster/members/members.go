// Package members tells the nodes of an application apart: which node owns
// which partition, and at which URL each node's admin listener answers, so
// that a node can forward a state API request to an address's owner
// (docs/cluster.md, "The state access API on every node").
//
// Ownership comes from Kafka: the consumer group's current assignment of
// the messages topic, read with DescribeGroups (Owners). The URLs come from
// member records a node writes into the meta topic when it starts
// (Publish) and deletes when it stops cleanly (Withdraw); Watch tails them.
// A node killed without Withdraw leaves its record behind; that is
// harmless, since only owners are looked up, and its successor with the
// same node id replaces the record.
package members

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/meta"
)

// KeyPrefix prefixes a member record's key in the meta topic; the node id
// follows.
const KeyPrefix = "member/"

// incarnationHeader carries, on a tombstone, the incarnation it deletes.
const incarnationHeader = "incarnation"

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
	v, err := json.Marshal(Member{NodeID: cfg.NodeID, AdminURL: cfg.Advertise, StartedAt: startedAt.UTC(), Incarnation: incarnation})
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
	if err := meta.Write(ctx, cfg.MetaTopic(), client.Opts, rec); err != nil {
		return fmt.Errorf("members: withdrawing node %s: %w", cfg.NodeID, err)
	}
	return nil
}

// Watcher keeps the current member records of the meta topic.
type Watcher struct {
	r      *meta.Reader
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	members map[string]Member
	changed chan struct{} // closed and replaced on every change
	err     error         // why tailing stopped, when it did
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
	w := &Watcher{r: r, log: log, members: map[string]Member{}, changed: make(chan struct{}), done: make(chan struct{})}
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
	if rec.Value == nil {
		cur, ok := w.members[node]
		if !ok {
			return
		}
		for _, h := range rec.Headers {
			if h.Key == incarnationHeader && string(h.Value) != cur.Incarnation {
				return // an older process's goodbye
			}
		}
		delete(w.members, node)
	} else {
		var m Member
		if err := json.Unmarshal(rec.Value, &m); err != nil || m.NodeID != node {
			w.log.Warn("cluster: an unreadable member record is ignored", "key", k, "offset", rec.Offset)
			return
		}
		w.members[node] = m
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// Lookup returns the member record of node.
func (w *Watcher) Lookup(node string) (Member, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.members[node]
	return m, ok
}

// All returns a copy of the current members by node id.
func (w *Watcher) All() map[string]Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.members)
}

// Wait blocks until ok holds for the current members, ctx ends, or
// tailing stopped (its error).
func (w *Watcher) Wait(ctx context.Context, ok func(map[string]Member) bool) error {
	for {
		w.mu.Lock()
		cur, ch, err := maps.Clone(w.members), w.changed, w.err
		w.mu.Unlock()
		if ok(cur) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-w.done:
		case <-ctx.Done():
			return ctx.Err()
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
