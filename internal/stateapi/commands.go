package stateapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Commands takes, in cluster mode, the mutations this node cannot apply
// itself: a write about an address whose partition it does not serve
// goes to the partition's owner as a command through the messages topic
// (docs/explanation/cluster.md, "The state access API on every node").
type Commands interface {
	// Send produces m as a command carrying its id and returns when m.Ack
	// says: AckAccepted once Kafka acknowledged the command (the receipt
	// then holds only the id and AckAccepted); otherwise once the owner's
	// receipt of m is final (committed or rejected), as a receipt with
	// AckCommitted. The owner applies the id once, however often Send
	// produces it. caller is who sent the write, as this node
	// authenticated them: the owner's receipt is read on their behalf (with
	// their scopes). An error that is a CommandError says what to answer;
	// ErrMoved and context errors are answered as the engine's.
	Send(ctx context.Context, m partition.Mutation, caller trust.Caller) (partition.Receipt, error)
}

// CommandError is a Commands failure that says how to answer it: its
// Error is the problem's detail, HTTPStatus the status, and MutationID the
// mutation id when the command may be in Kafka (the answer then names its
// receipt, so the client can follow it instead of sending the write again
// under a new id), or "". An interface, so that the sender (the cluster's
// command package) need not import this one.
type CommandError interface {
	error
	HTTPStatus() int
	MutationID() string
}

// commandOps are the mutations that travel as commands: those whose
// request carries everything the owner needs. A restore reads its image
// from the history of the store it runs on, so it is sent to the owner
// over HTTP instead (forwardChange); a revert reads its before-images
// from the audit log of the node it is sent to.
var commandOps = map[partition.MutationOp]bool{partition.OpPut: true, partition.OpDelete: true, partition.OpDeleteAll: true}

// mutate hands m to the engine, or in cluster mode, when the engine does
// not serve m's partition, to Options.Commands. The engine answers ErrMoved
// before the mutation reached a core, or when the core that had it was
// revoked: then it was applied only if the commit carrying it committed,
// and its receipt is then in the changelog, so the command, carrying the
// same id, is skipped by the owner and its receipt read. Either way the id
// applies once.
func (s *Server) mutate(r *http.Request, m partition.Mutation) (partition.Receipt, error) {
	rc, err := s.eng.Mutate(r.Context(), m)
	if err == nil || s.opts.Commands == nil || !commandOps[m.Op] || !errors.Is(err, engine.ErrMoved) {
		return rc, err
	}
	return s.opts.Commands.Send(r.Context(), m, s.Caller(r))
}

// commandError answers a Commands failure; false when err is not one.
func commandError(w http.ResponseWriter, r *http.Request, err error) bool {
	var ce CommandError
	if !errors.As(err, &ce) {
		return false
	}
	if id := ce.MutationID(); id != "" {
		w.Header().Set("Location", "/mutations/"+id)
	}
	status := ce.HTTPStatus()
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	fail(w, r, status, ce.Error())
	return true
}

// noTypenameHere is the 400 of a text or JSON write about an address owned
// elsewhere whose typename this node does not know: the value cannot be
// parsed without it, and only the owner holds the entry.
func noTypenameHere(state string) error {
	return fmt.Errorf("no typename for %q known on this node, which does not own the address: send a Statefun-Type header, or the value as %s (the owner then takes the registered or the stored typename)", state, mediaOctet)
}

// rejectionName names a rejection in a receipt's "rejection" field, so a
// client (and a node reading the owner's receipt) can tell a failed
// condition from a type conflict without parsing the reason.
func rejectionName(c partition.RejectCode) string {
	switch c {
	case partition.Applied:
		return ""
	case partition.RejectPrecondition:
		return "precondition"
	case partition.RejectTypeConflict:
		return "type-conflict"
	case partition.RejectNoTypename:
		return "no-typename"
	case partition.RejectNotFound:
		return "not-found"
	case partition.RejectConflict:
		return "conflict"
	default:
		return "other"
	}
}

// DecodeReceipt reads a receipt as GET /mutations/<id> answers it
// (receiptJSON) back into its stored form. The cluster's command sender
// reads the owner's receipts with it (handed to it as a function, so that
// the format is read where it is written without the sender importing
// this package).
func DecodeReceipt(body []byte) (*protocol.Receipt, error) {
	var rj receiptJSON
	if err := json.Unmarshal(body, &rj); err != nil {
		return nil, fmt.Errorf("the receipt does not decode: %w", err)
	}
	rc := &protocol.Receipt{Mutation: rj.Mutation, Status: rj.Status, Reason: rj.Reason}
	if rj.Checkpoint != nil {
		rc.Checkpoint = *rj.Checkpoint
	}
	version := func(v *string) uint64 {
		if v == nil {
			return 0
		}
		n, _ := strconv.ParseUint(*v, 10, 64)
		return n
	}
	rc.Version, rc.PreviousVersion = version(rj.Version), version(rj.PreviousVersion)
	if rj.Status == "rejected" {
		code, ok := rejectionCode(rj.Rejection)
		if !ok {
			return nil, fmt.Errorf("a rejected receipt names no known rejection (%q): the owner runs another build", rj.Rejection)
		}
		rc.Reject = int32(code)
	}
	return rc, nil
}

// rejectionCode is the code a receipt's "rejection" field names.
func rejectionCode(name string) (partition.RejectCode, bool) {
	for _, c := range []partition.RejectCode{partition.RejectPrecondition, partition.RejectTypeConflict,
		partition.RejectNoTypename, partition.RejectNotFound, partition.RejectConflict} {
		if rejectionName(c) == name {
			return c, true
		}
	}
	return 0, false
}
