// Package command sends the state API's writes about addresses a node does
// not own to their owner, as commands through the application's messages
// topic (docs/explanation/cluster.md, "The state access API on every node"): the
// mutation travels keyed and partitioned like a message to its address,
// carrying its id, and the owner's session applies it in the address's
// mailbox order, each id once (the engine's SubmitArrivals skips an id
// with a receipt, and receipts travel in the changelog, so the check
// survives a move). The sender then waits for the owner's receipt, read
// over HTTP from the owner's GET /mutations/<id>?wait=, following it when
// the partition moves. That read is signed with the cluster secret on
// behalf of the caller (package trust); the caller's token stays on the
// node it was sent to.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Config configures a Sender.
type Config struct {
	// Produce writes a command to the messages topic, at its address's
	// partition, and returns once Kafka acknowledged it (acks=all, an
	// idempotent producer: the node's ingress producer, node.Ingest).
	Produce func(ctx context.Context, env *protocol.Envelope) error
	// Owner names the node that owns partition p now and its admin URL
	// (node.Owner); ok is false while p has no owner.
	Owner func(ctx context.Context, p int) (node, adminURL string, ok bool)
	// Self is this node's id: a receipt of a partition this node owns is
	// read from Local, not over HTTP.
	Self string
	// Local waits for a receipt in this node's store until it is final or
	// ctx ends (the engine's WaitReceipt).
	Local func(ctx context.Context, id string) (*protocol.Receipt, bool, error)
	// Partitions is the application's P.
	Partitions int
	// Budget bounds how long Send waits for Kafka and for a final receipt;
	// default one minute (the API's cap on ?wait=).
	Budget time.Duration
	// Client reads receipts from owners; default a client of its own.
	Client *http.Client
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// DecodeReceipt reads a receipt as the owner's GET /mutations/<id>
	// answers it (stateapi.DecodeReceipt).
	DecodeReceipt func(body []byte) (*protocol.Receipt, error)

	// Auth signs the receipt reads sent to owners with the cluster
	// secret, vouching for the caller; nil (no secret): they go unsigned.
	// The caller's own token is never sent.
	Auth *trust.NodeAuth
}

// Error is a Sender failure with the answer the state API gives it
// (stateapi.CommandError): the status, a detail for the problem, and the
// mutation id when the command may be in Kafka.
type Error struct {
	Status   int
	Detail   string
	Mutation string
}

func (e *Error) Error() string { return e.Detail }

// HTTPStatus is the status to answer.
func (e *Error) HTTPStatus() int { return e.Status }

// MutationID is the id of a command that may be in Kafka, or "".
func (e *Error) MutationID() string { return e.Mutation }

// Sender implements stateapi.Commands.
type Sender struct {
	cfg Config
}

// New returns a Sender.
func New(cfg Config) (*Sender, error) {
	if cfg.Produce == nil || cfg.Owner == nil || cfg.Local == nil || cfg.DecodeReceipt == nil || cfg.Partitions <= 0 {
		return nil, errors.New("cluster: command: Config.Produce, Owner, Local, DecodeReceipt and Partitions are required")
	}
	if cfg.Budget <= 0 {
		cfg.Budget = time.Minute
	}
	if cfg.Client == nil {
		// No proxy from the environment: nodes reach each other directly.
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sender{cfg: cfg}, nil
}

// Send produces m as a command and answers when m.Ack says (see
// stateapi.Commands). It produces the same command again, with the same
// id, when Kafka's answer was lost and when the partition's owner changed
// while it waited: a record in the topic is never lost once acknowledged,
// but producing again costs one record the owner skips, and covers a
// command a broker lost after all. The owner applies the id once.
func (s *Sender) Send(ctx context.Context, m partition.Mutation, caller trust.Caller) (partition.Receipt, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Budget)
	defer cancel()
	env := engine.Command(m)
	p := address.Partition(m.Addr.ID, s.cfg.Partitions)
	owner, _, known := s.cfg.Owner(ctx, p)
	if err := s.produce(ctx, env, m.ID, p); err != nil {
		return partition.Receipt{}, err
	}
	if m.Ack == partition.AckAccepted {
		return partition.Receipt{Mutation: m.ID, Ack: partition.AckAccepted, Addr: m.Addr, State: m.State}, nil
	}
	for {
		node, adminURL, ok := s.cfg.Owner(ctx, p)
		if ok && (!known || node != owner) {
			s.cfg.Logger.Info("cluster: a forwarded mutation's partition changed owner while its receipt was awaited; producing its command again (the owner applies its id once)",
				"mutation", m.ID, "partition", p, "from", owner, "to", node)
			if err := s.produce(ctx, env, m.ID, p); err != nil {
				return partition.Receipt{}, err
			}
			owner, known = node, true
		}
		var (
			rc  *protocol.Receipt
			err error
		)
		switch {
		case ok && node == s.cfg.Self:
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			rc, _, err = s.cfg.Local(wctx, m.ID)
			wcancel()
		case ok && adminURL != "":
			rc, err = s.fetch(ctx, node, adminURL, m.ID, caller)
		default:
			// No owner at the moment (a move), or its URL is not known
			// yet: ask again shortly.
			err = sleep(ctx, 200*time.Millisecond)
		}
		if rc != nil && (rc.GetStatus() == "committed" || rc.GetStatus() == "rejected") {
			return s.receiptOf(rc, m), nil
		}
		var ce *Error
		if errors.As(err, &ce) {
			return partition.Receipt{}, err
		}
		if err != nil {
			s.cfg.Logger.Debug("cluster: reading a forwarded mutation's receipt", "mutation", m.ID, "owner", node, "err", err)
			// An owner that does not answer (killed, restarting): its
			// partition moves after the group's session timeout.
			sleep(ctx, 200*time.Millisecond)
		}
		if ctx.Err() != nil {
			return partition.Receipt{}, &Error{Status: http.StatusServiceUnavailable, Mutation: m.ID,
				Detail: fmt.Sprintf("mutation %s is in Kafka as a command for partition %d, but its owner's receipt was not final within %v (the partition may be moving); it will apply once when the owner takes it: read its receipt at /mutations/%s on the owner rather than sending the write again under a new id",
					m.ID, p, s.cfg.Budget, m.ID)}
		}
	}
}

// produce writes the command until Kafka acknowledges it or ctx ends.
func (s *Sender) produce(ctx context.Context, env *protocol.Envelope, id string, p int) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.cfg.Produce(pctx, env)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, ingress.ErrTooLarge) {
			// Kafka would refuse it on every retry, and the owner could
			// not log it in its changelog either.
			return &Error{Status: http.StatusRequestEntityTooLarge, Mutation: id,
				Detail: fmt.Sprintf("mutation %s was not applied and cannot be in cluster mode: %v", id, err)}
		}
		s.cfg.Logger.Warn("cluster: producing a state mutation's command", "mutation", id, "partition", p, "err", err)
		if sleep(ctx, 200*time.Millisecond) != nil {
			return &Error{Status: http.StatusServiceUnavailable, Mutation: id,
				Detail: fmt.Sprintf("Kafka did not acknowledge the command of mutation %s (partition %d) in time: %v; it may still apply, once: read its receipt at /mutations/%s on the owner before sending the write again", id, p, err, id)}
		}
	}
}

// fetch reads the receipt of id from the API of node, the owner, at
// adminURL, on behalf of caller, waiting there a few seconds for it to be
// final: short enough to notice a move soon.
func (s *Sender) fetch(ctx context.Context, node, adminURL, id string, caller trust.Caller) (*protocol.Receipt, error) {
	wait := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(min(wait, time.Until(dl)-100*time.Millisecond), 0)
	}
	u := strings.TrimSuffix(adminURL, "/") + "/mutations/" + url.PathEscape(id) + "?wait=" + wait.String()
	rctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil || req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("cluster: command: node %s's admin URL %q is not an http or https URL; nothing is sent to it", node, adminURL)
	}
	req.Header.Set(forward.Header, s.cfg.Self)
	if s.cfg.Auth != nil {
		s.cfg.Auth.Sign(req, node, caller, nil)
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil // not taken in yet
	case http.StatusForbidden:
		return nil, &Error{Status: http.StatusForbidden, Mutation: id,
			Detail: fmt.Sprintf("mutation %s was sent to the owner as a command, but its receipt cannot be read there with this token (%s): a write through a node that does not own the address reads the owner's receipt on the caller's behalf, which needs the read scope; use ?ack=accepted, or give the token the read scope", id, resp.Status)}
	case http.StatusUnauthorized:
		return nil, &Error{Status: http.StatusBadGateway, Mutation: id,
			Detail: fmt.Sprintf("mutation %s was sent to the owner as a command, but node %s refused this node's request for its receipt (%s: %s); the write applies once regardless: read its receipt at /mutations/%s on the owner",
				id, node, resp.Status, strings.TrimSpace(string(body)), id)}
	default:
		if resp.StatusCode >= 500 {
			// The owner stopping, busy or moving: ask again.
			return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
		}
		// Asking again would get the same answer (a Host the owner does
		// not allow, say): say what the owner said.
		return nil, &Error{Status: http.StatusBadGateway, Mutation: id,
			Detail: fmt.Sprintf("mutation %s was sent to the owner as a command, but the owner refused to give its receipt (GET %s: %s: %s); the write applies once regardless",
				id, u, resp.Status, strings.TrimSpace(string(body)))}
	}
	rc, err := s.cfg.DecodeReceipt(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return rc, nil
}

// receiptOf is a final receipt as the API answers a mutation's own
// caller.
func (s *Sender) receiptOf(rc *protocol.Receipt, m partition.Mutation) partition.Receipt {
	return partition.Receipt{Mutation: m.ID, Addr: m.Addr, State: m.State, Ack: partition.AckCommitted,
		Reject: partition.RejectCode(rc.GetReject()), Reason: rc.GetReason(), Checkpoint: rc.GetCheckpoint(),
		Version: rc.GetVersion(), PreviousVersion: rc.GetPreviousVersion(), At: rc.GetAt(),
		Partition: address.Partition(m.Addr.ID, s.cfg.Partitions)}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
