package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/members"
)

// txnState is how a node's transactional id stands at its transaction
// coordinator. It is comparable: two looks that differ mean the node (or
// a new process with its node id) made progress in between.
type txnState struct {
	producerID int64
	epoch      int16
	state      string // Kafka's (Empty, Ongoing, PrepareCommit, ...); "" for an id the coordinator does not know
	start      int64  // when the open transaction started (ms); -1 without one
}

// open reports whether a transaction is open and would stay open until
// its timeout if its producer is gone. A transaction preparing its commit
// or abort is finished by the coordinator on its own.
func (t txnState) open() bool { return t.state == "Ongoing" }

// groupOps is what the detector does with Kafka. Every method may be
// called concurrently by several nodes about the same peer: each is
// harmless when another node did it first.
type groupOps interface {
	// owners returns the node id of each member of the group that owns a
	// partition of the messages topic, with its member id.
	owners(ctx context.Context) (map[string]string, error)
	// txn reads how node's transactional id stands.
	txn(ctx context.Context, node string) (txnState, error)
	// fence bumps the producer epoch of node's transactional id, which
	// aborts its open transaction, as a restart of the node would. It
	// names the producer id and epoch of st, so that on Kafka a newer
	// process of the node (which bumped the epoch itself) is not fenced.
	fence(ctx context.Context, node string, st txnState) error
	// leave removes node's static membership from the group, naming the
	// member id it was seen with, so that on Kafka a newer process of the
	// node (which joined with a new member id) is not removed. It reports
	// whether this call removed it, and whether it is gone from the group
	// (by this call, or before it: another node removed it).
	leave(ctx context.Context, node, memberID string) (removed, gone bool, err error)
}

// kafkaOps is groupOps on the application's Kafka.
type kafkaOps struct {
	cfg *clusterconfig.Config
	cl  *kgo.Client
	adm *kadm.Client
	// txnTimeout is the transaction timeout a fence's InitProducerID
	// names (the next process of the fenced node sets its own).
	txnTimeout time.Duration
}

func (k *kafkaOps) owners(ctx context.Context) (map[string]string, error) {
	o, err := members.Owners(ctx, k.adm, k.cfg)
	if err != nil {
		return nil, err
	}
	return o.MemberIDs, nil
}

func (k *kafkaOps) txn(ctx context.Context, node string) (txnState, error) {
	tid := k.cfg.TransactionalIDOf(node)
	ds, err := k.adm.DescribeTransactions(ctx, tid)
	if err != nil {
		return txnState{}, fmt.Errorf("failover: describing transactional id %s: %w", tid, err)
	}
	d, err := ds.On(tid, nil)
	if errors.Is(err, kerr.TransactionalIDNotFound) || errors.Is(d.Err, kerr.TransactionalIDNotFound) {
		return txnState{start: -1}, nil
	}
	if err == nil {
		err = d.Err
	}
	if err != nil {
		return txnState{}, fmt.Errorf("failover: describing transactional id %s: %w", tid, err)
	}
	start := d.StartTimestamp
	if d.State != "Ongoing" {
		start = -1
	}
	return txnState{producerID: d.ProducerID, epoch: d.ProducerEpoch, state: d.State, start: start}, nil
}

func (k *kafkaOps) fence(ctx context.Context, node string, st txnState) error {
	tid := k.cfg.TransactionalIDOf(node)
	backoff := 20 * time.Millisecond
	for {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(tid)
		req.TransactionTimeoutMillis = int32(k.txnTimeout / time.Millisecond)
		// KIP-360: only the producer id and epoch seen are bumped.
		req.ProducerID, req.ProducerEpoch = st.producerID, st.epoch
		resp, err := req.RequestWith(ctx, k.cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil,
			// Bumped already: by another node, or by a new process of
			// this node id.
			errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
			return nil
		case errors.Is(err, kerr.ConcurrentTransactions):
			// The coordinator is aborting the transaction (a real broker
			// answers so to the first InitProducerID); ask again until
			// it is done.
		default:
			return fmt.Errorf("failover: fencing transactional id %s: %w", tid, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: fencing transactional id %s: %w", tid, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func (k *kafkaOps) leave(ctx context.Context, node, memberID string) (removed, gone bool, err error) {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = k.cfg.Group()
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	m.InstanceID = kmsg.StringPtr(node)
	m.Reason = kmsg.StringPtr("statefun: node " + k.cfg.NodeID + " found node " + node + " down")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, k.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && len(resp.Members) > 0 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	switch {
	case err == nil:
		return true, true, nil
	case errors.Is(err, kerr.UnknownMemberID):
		// Another node removed it first.
		return false, true, nil
	case errors.Is(err, kerr.FencedInstanceID):
		// Another member id holds the instance id: the node came back.
		return false, false, nil
	default:
		return false, false, fmt.Errorf("failover: removing node %s from group %s: %w", node, k.cfg.Group(), err)
	}
}
