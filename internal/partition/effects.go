package partition

import (
	"errors"
	"fmt"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"google.golang.org/protobuf/proto"
)

// ViolationError is a response that broke the protocol. Its effects are
// refused as a whole and the batch is retried like a failed call: StateFun
// would fail the whole job; we keep every other address running and let an
// operator (or a redeployed function) fix it.
type ViolationError struct {
	Reason string
	// Err, if set, is the error the violation was found by (a response
	// that does not decode).
	Err error
}

func (e *ViolationError) Error() string { return "protocol violation: " + e.Reason }

// Unwrap returns Err.
func (e *ViolationError) Unwrap() error { return e.Err }

// AsViolation makes err, a call's failure that is the function's breach of
// the protocol (a 2xx body that is not a FromFunction), a protocol
// violation: the poison policy's --pause-on-violation sees it.
func AsViolation(err error) error {
	return &ViolationError{Reason: err.Error(), Err: err}
}

func violation(format string, args ...any) error {
	return &ViolationError{Reason: fmt.Sprintf(format, args...)}
}

// IsViolation reports whether err is a protocol violation by the function.
func IsViolation(err error) bool {
	var v *ViolationError
	return errors.As(err, &v)
}

// effects is a validated response, ready to apply without further checks.
type effects struct {
	messages  []*protocol.Envelope
	delayed   []delayedOp
	egress    []Egress
	mutations []mutation
}

type delayedOp struct {
	cancel bool
	token  string
	delay  int64
	env    *protocol.Envelope
}

type mutation struct {
	spec  Spec
	del   bool
	value []byte
}

// validate checks a whole response before any of it is applied, so that a
// bad response changes nothing.
func (c *Core) validate(self address.Address, r *protocol.FromFunction_InvocationResponse) (*effects, error) {
	fx := &effects{}
	if r == nil {
		return fx, nil
	}
	caller := toProto(self)
	for i, m := range r.GetOutgoingMessages() {
		if err := c.checkMessage(caller, m.GetTarget(), m.GetArgument()); err != nil {
			return nil, violation("outgoing message %d: %v", i, err)
		}
		env := &protocol.Envelope{Target: m.GetTarget(), Caller: caller, Argument: m.GetArgument()}
		if err := c.checkMessageRecord(env); err != nil {
			return nil, violation("outgoing message %d: %v", i, err)
		}
		fx.messages = append(fx.messages, env)
	}
	// Tokens are scoped by the sender's id; follow the adds and cancels of
	// this response in order to find a duplicate it creates itself.
	changed := map[string]bool{} // token → pending after this response
	pending := func(tok string) (bool, error) {
		if p, ok := changed[tok]; ok {
			return p, nil
		}
		return c.tokenPending(self.ID, tok)
	}
	for i, d := range r.GetDelayedInvocations() {
		if d.GetIsCancellationRequest() {
			if d.GetCancellationToken() == "" {
				return nil, violation("delayed invocation %d: a cancellation request without a token", i)
			}
			if err := checkToken(d.GetCancellationToken()); err != nil {
				return nil, violation("delayed invocation %d: %v", i, err)
			}
			fx.delayed = append(fx.delayed, delayedOp{cancel: true, token: d.GetCancellationToken()})
			changed[d.GetCancellationToken()] = false
			continue
		}
		if d.GetDelayInMs() < 0 {
			return nil, violation("delayed invocation %d: negative delay %d ms", i, d.GetDelayInMs())
		}
		if err := c.checkMessage(caller, d.GetTarget(), d.GetArgument()); err != nil {
			return nil, violation("delayed invocation %d: %v", i, err)
		}
		if tok := d.GetCancellationToken(); tok != "" {
			if err := checkToken(tok); err != nil {
				return nil, violation("delayed invocation %d: %v", i, err)
			}
			if p, err := pending(tok); err != nil {
				return nil, err
			} else if p {
				return nil, violation("delayed invocation %d: cancellation token %q is already pending for id %q", i, tok, self.ID)
			}
			changed[tok] = true
		}
		env := &protocol.Envelope{Target: d.GetTarget(), Caller: caller, Argument: d.GetArgument(), CancellationToken: d.GetCancellationToken()}
		if err := c.checkMessageRecord(env); err != nil {
			return nil, violation("delayed invocation %d: %v", i, err)
		}
		fx.delayed = append(fx.delayed, delayedOp{
			token: d.GetCancellationToken(),
			delay: d.GetDelayInMs(),
			env:   env,
		})
	}
	for i, e := range r.GetOutgoingEgresses() {
		id := e.GetEgressNamespace() + "/" + e.GetEgressType()
		if c.cfg.Egress == nil {
			return nil, violation("egress message %d: unknown egress %s", i, id)
		}
		route, err := c.cfg.Egress(e.GetEgressNamespace(), e.GetEgressType(), e.GetArgument())
		if err != nil {
			return nil, violation("egress message %d to %s: %v", i, id, err)
		}
		fx.egress = append(fx.egress, Egress{Egress: id, Route: route, Record: &protocol.EgressRecord{
			EgressNamespace: e.GetEgressNamespace(), EgressType: e.GetEgressType(), Argument: e.GetArgument(),
		}})
	}
	specs, err := c.specsOf(self.Type)
	if err != nil {
		return nil, err
	}
	for i, m := range r.GetStateMutations() {
		si := indexSpec(specs, m.GetStateName())
		if si < 0 {
			return nil, violation("state mutation %d: state %q is not registered for %s", i, m.GetStateName(), self.Type)
		}
		spec := specs[si]
		switch m.GetMutationType() {
		case protocol.FromFunction_PersistedValueMutation_DELETE:
			fx.mutations = append(fx.mutations, mutation{spec: spec, del: true})
		case protocol.FromFunction_PersistedValueMutation_MODIFY:
			v := m.GetStateValue()
			if v == nil {
				return nil, violation("state mutation %d: MODIFY of %q without a value", i, spec.Name)
			}
			if v.GetTypename() != spec.Typename {
				return nil, violation("state mutation %d: state %q is registered as %s, the function wrote %s", i, spec.Name, spec.Typename, v.GetTypename())
			}
			if err := c.checkRecord(caller, len(v.GetValue())+len(v.GetTypename())+len(spec.Name)); err != nil {
				return nil, violation("state mutation %d: the value of %q: %v", i, spec.Name, err)
			}
			fx.mutations = append(fx.mutations, mutation{spec: spec, value: v.GetValue()})
		default:
			return nil, violation("state mutation %d: unknown mutation type %d", i, m.GetMutationType())
		}
	}
	return fx, nil
}

// checkMessage checks a message a function sends: a target that can be
// stored, reached through the state API and delivered (an endpoint serves
// its type and can carry the message in a request), and an argument with a
// typename that can be encoded.
func (c *Core) checkMessage(caller, a *protocol.Address, arg *protocol.TypedValue) error {
	if a == nil {
		return errors.New("no target address")
	}
	t := toAddress(a)
	if err := address.CheckAddress(t); err != nil {
		return fmt.Errorf("target %s", fieldProblem(err))
	}
	if c.cfg.Routable != nil {
		if err := c.cfg.Routable(t.Type); err != nil {
			return fmt.Errorf("target: %w", err)
		}
	}
	if arg == nil {
		return fmt.Errorf("to %s has no argument", t.Type)
	}
	if err := address.CheckTypename(arg.GetTypename()); err != nil {
		return fmt.Errorf("argument %s", fieldProblem(err))
	}
	return CheckDeliverable(c.cfg.MaxBatchBytes, t.Type, caller, arg)
}

// CheckDeliverable refuses a message larger than what one request to the
// endpoint of its target's type t may carry (maxBatchBytes, as
// Config.MaxBatchBytes; the first message of a batch goes alone, so this
// is the most any one message can be). Stored, such a message would fail
// every attempt at the head of its target's inbox, blocking the messages
// behind it, while whoever made it had succeeded. caller may be nil where
// it is not known: the room maxBatchBytes leaves for the envelope covers
// it. The
// playground and Kafka ingresses refuse such a message the same way (413,
// a dead letter); a function's response that sends one is a protocol
// violation, and the state API refuses an edit or a re-send that makes one.
func CheckDeliverable(maxBatchBytes func(address.TypeName) int, t address.TypeName, caller *protocol.Address, arg *protocol.TypedValue) error {
	if maxBatchBytes == nil {
		return nil
	}
	limit := maxBatchBytes(t)
	if limit <= 0 {
		return nil
	}
	// An upper bound of the encoded size first, so that the usual small
	// message is not measured: the fields plus their tags and lengths.
	if bound := len(arg.GetValue()) + len(arg.GetTypename()) + len(caller.GetNamespace()) +
		len(caller.GetType()) + len(caller.GetId()) + 64; bound <= limit {
		return nil
	}
	if n := proto.Size(&protocol.ToFunction_Invocation{Caller: caller, Argument: arg}); n > limit {
		return fmt.Errorf("to %s is %d bytes, over the %d bytes a request to its endpoint carries for one message (its payload_max_bytes less room for the envelope); it could never be delivered", t, n, limit)
	}
	return nil
}

// recordSlack is what a log record carries besides its payload and the
// address in its key: a store key's framing, a stored value's version,
// expiry and field tags, an inbox or timer key's sequence numbers.
const recordSlack = 128

// checkMessageRecord is checkRecord for a message: its encoded envelope,
// measured only when there is a limit (embedded mode has none, and pays
// nothing for the check).
func (c *Core) checkMessageRecord(env *protocol.Envelope) error {
	if c.cfg.MaxRecordBytes <= 0 {
		return nil
	}
	return c.checkRecord(env.GetTarget(), proto.Size(env))
}

// checkRecord checks that an effect of payload bytes about address a fits
// one record of the application's log (Config.MaxRecordBytes).
func (c *Core) checkRecord(a *protocol.Address, payload int) error {
	if c.cfg.MaxRecordBytes <= 0 {
		return nil
	}
	key := len(a.GetNamespace()) + len(a.GetType()) + len(a.GetId())
	if n := payload + key + recordSlack; n > c.cfg.MaxRecordBytes {
		return fmt.Errorf("%d bytes, over the %d bytes one record of the cluster's log takes (the Kafka producer's max.request.size, --cluster-property); it could never be committed", n, c.cfg.MaxRecordBytes)
	}
	return nil
}

// checkToken checks a cancellation token, stored with its delayed message:
// UTF-8 (so it encodes) and bounded like an id, whose scope it shares.
func checkToken(tok string) error {
	if err := address.CheckSegment("cancellation token", tok); err != nil {
		return errors.New(fieldProblem(err))
	}
	return nil
}

// fieldProblem words a validator's error without its package prefix, for a
// violation that names the item it is about.
func fieldProblem(err error) string {
	var fe *address.FieldError
	if errors.As(err, &fe) {
		return fe.Field + " " + fe.Problem
	}
	return err.Error()
}

// apply carries out a validated response of b, in StateFun's order:
// messages, delayed messages, egress, then state.
func (c *Core) apply(self address.Address, b *batch, fx *effects) error {
	for _, env := range fx.messages {
		if err := c.produce(env); err != nil {
			return err
		}
	}
	for _, d := range fx.delayed {
		if d.cancel {
			if err := c.cancelTimer(self.ID, d.token); err != nil {
				return err
			}
			continue
		}
		c.timerSeq++
		t := Timer{Key: TimerKey{Partition: c.cfg.ID, Due: addSat(c.now, d.delay), ID: c.timerSeq}, Env: d.env}
		c.addTimer(t, c.commitID+1)
		c.pending.TimersAdded = append(c.pending.TimersAdded, t)
	}
	c.pending.Egress = append(c.pending.Egress, fx.egress...)

	c.cause = batchCause(b)
	defer func() { c.cause = nil }()
	specs, err := c.specsOf(self.Type)
	if err != nil {
		return err
	}
	touched := make(map[string]bool, len(fx.mutations))
	for _, m := range fx.mutations {
		touched[m.spec.Name] = true
		if m.del {
			if _, ok, err := c.getRaw(self, m.spec.Name); err != nil {
				return err
			} else if ok {
				c.write(self, m.spec.Name, Entry{}, true)
			}
			continue
		}
		c.versionSeq++
		e := Entry{Typename: m.spec.Typename, Value: m.value, Version: c.versionSeq}
		if m.spec.Mode != ExpireNone {
			e.ExpiresAt = addSat(c.now, m.spec.TTL)
		}
		c.write(self, m.spec.Name, e, false)
	}
	// The states the batch did not write: a value that expired (also while
	// the invocation ran) is cleaned up. (An AFTER_INVOKE clock restarted
	// when the request was built.)
	for _, s := range specs {
		if touched[s.Name] || s.Mode == ExpireNone {
			continue
		}
		e, ok, err := c.getRaw(self, s.Name)
		if err != nil {
			return err
		}
		if ok && e.expired(c.now) {
			c.cause = expiryCause
			c.write(self, s.Name, Entry{}, true)
		}
	}
	for _, q := range b.msgs {
		c.pending.Consumed = append(c.pending.Consumed, q.key)
	}
	return nil
}
