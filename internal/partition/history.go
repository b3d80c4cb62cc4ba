package partition

import (
	"fmt"
	"slices"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
)

// This file is the core's side of state history: every StateWrite of a
// commit says what caused it, so that the shell can write a history record
// of the change in the same commit; and restore, the operator mutation that
// sets an address (or one entry) back to an image taken from that history.

// CauseKind says what made a state change.
type CauseKind int

const (
	// CauseNone marks a write that changes no value: an AFTER_INVOKE TTL
	// restarted when a request was built. It is not a change of the entry
	// (its version stays), so it has no history record.
	CauseNone CauseKind = iota
	// CauseInvocation is a state mutation in a function's response to a
	// batch of messages.
	CauseInvocation
	// CauseMutation is an operator mutation of the state API.
	CauseMutation
	// CauseExpiry is the deletion of a value whose TTL ran out, committed
	// with the next batch of its address.
	CauseExpiry
)

// MaxCauseMessages is how many of a batch's messages a Cause lists. A
// function answers a batch with one set of state mutations, so a change
// cannot be attributed to one message of it; the cause names the batch's
// messages in arrival order (the last one is the last the function saw
// before it answered), up to this many, and counts them all.
const MaxCauseMessages = 8

// CauseMessage is one message of the batch that caused a change.
type CauseMessage struct {
	// Typename is the message argument's typename.
	Typename string
	// Caller is the sending function, nil for an ingress message (or a
	// mutation queued from the inbox).
	Caller *address.Address
}

// Cause is what made a state change: an invocation or a mutation.
type Cause struct {
	Kind CauseKind
	// Messages are the first MaxCauseMessages messages of the batch
	// (CauseInvocation); MessageCount counts them all.
	Messages     []CauseMessage
	MessageCount int
	// Mutation, Principal, Reason and Reverts name an operator mutation
	// (CauseMutation).
	Mutation, Principal, Reason, Reverts string
}

// String renders a cause for scripts and logs.
func (c *Cause) String() string {
	if c == nil {
		return "none"
	}
	switch c.Kind {
	case CauseInvocation:
		parts := make([]string, len(c.Messages))
		for i, m := range c.Messages {
			from := "ingress"
			if m.Caller != nil {
				from = m.Caller.String()
			}
			parts[i] = m.Typename + " from " + from
		}
		return fmt.Sprintf("invocation of %d message(s): %s", c.MessageCount, strings.Join(parts, ", "))
	case CauseMutation:
		s := fmt.Sprintf("mutation %s by %s", c.Mutation, c.Principal)
		if c.Reason != "" {
			s += fmt.Sprintf(" (%s)", c.Reason)
		}
		if c.Reverts != "" {
			s += " reverting " + c.Reverts
		}
		return s
	case CauseExpiry:
		return "expiry"
	}
	return "none"
}

// batchCause is the cause of the state changes of a batch's response.
func batchCause(b *batch) *Cause {
	c := &Cause{Kind: CauseInvocation, MessageCount: len(b.msgs)}
	for _, q := range b.msgs {
		if len(c.Messages) == MaxCauseMessages {
			break
		}
		m := CauseMessage{Typename: q.inv.GetArgument().GetTypename()}
		if p := q.inv.GetCaller(); p != nil {
			a := toAddress(p)
			m.Caller = &a
		}
		c.Messages = append(c.Messages, m)
	}
	return c
}

func mutationCause(m *Mutation) *Cause {
	return &Cause{Kind: CauseMutation, Mutation: m.ID, Principal: m.Principal, Reason: m.Reason, Reverts: m.Reverts}
}

var expiryCause = &Cause{Kind: CauseExpiry}

// RestoreEntry is one entry of a restore's image: the value it had at the
// point restored to (Typename, Value, Version), or no value (Absent).
type RestoreEntry struct {
	State    string
	Absent   bool
	Typename string
	Value    []byte
	// Version is the version the entry had then: an entry that still holds
	// it has not changed since, and is left alone.
	Version uint64
}

// applyRestore carries out an OpRestore: every entry of the image (and,
// for a whole address, every entry not in it: deleted) is set back, as one
// mutation with one receipt and an audit record per entry it changed. A
// type conflict with a registered state rejects the whole restore: nothing
// of it applies.
func (c *Core) applyRestore(m *Mutation, rc Receipt) error {
	image := map[string]RestoreEntry{}
	for _, r := range m.Image {
		image[r.State] = r
	}
	var cur []StateEntry
	if m.State == "" {
		all, err := c.entries(m.Addr, "")
		if err != nil {
			return err
		}
		cur = all
	} else {
		all, err := c.entries(m.Addr, m.State)
		if err != nil {
			return err
		}
		cur = all
		for k := range image {
			if k != m.State {
				delete(image, k)
			}
		}
		if _, ok := image[m.State]; !ok {
			image[m.State] = RestoreEntry{State: m.State, Absent: true}
		}
	}
	current := map[string]Entry{}
	for _, e := range cur {
		current[e.State] = e.Entry
		if _, ok := image[e.State]; !ok {
			image[e.State] = RestoreEntry{State: e.State, Absent: true}
		}
	}
	specs, err := c.specsOf(m.Addr.Type)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(image))
	for k, r := range image {
		if i := indexSpec(specs, k); i >= 0 && !r.Absent && r.Typename != specs[i].Typename {
			rc.Reject, rc.Reason = RejectTypeConflict, "the function registered "+k+" as "+specs[i].Typename+", the value to restore is "+r.Typename
			c.settle(rc)
			return nil
		}
		names = append(names, k)
	}
	slices.Sort(names)
	changed := false
	for _, k := range names {
		r := image[k]
		e, exists := current[k]
		switch {
		case r.Absent && !exists:
			continue
		case !r.Absent && exists && e.Version == r.Version:
			continue // unchanged since the point restored to
		}
		var before *Entry
		if exists {
			b := e
			before = &b
		}
		changed = true
		if r.Absent {
			c.write(m.Addr, k, Entry{}, true)
			c.audit(m, k, before, 0, "")
			continue
		}
		c.versionSeq++
		ne := Entry{Typename: r.Typename, Value: r.Value, Version: c.versionSeq}
		if i := indexSpec(specs, k); i >= 0 && specs[i].Mode != ExpireNone {
			ne.ExpiresAt = addSat(c.now, specs[i].TTL)
		}
		c.write(m.Addr, k, ne, false)
		c.audit(m, k, before, ne.Version, ne.Typename)
		if k == m.State {
			rc.Version = ne.Version
		}
	}
	if m.State != "" {
		if e, ok := current[m.State]; ok {
			rc.PreviousVersion = e.Version
			if rc.Version == 0 && !image[m.State].Absent {
				rc.Version = e.Version
			}
		}
	}
	if !changed {
		rc.Reason = "nothing to restore: the state is as it was then"
	}
	c.settle(rc)
	return nil
}
