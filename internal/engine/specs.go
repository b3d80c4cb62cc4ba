package engine

import (
	"sync"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// specRegistry is the states every function type has registered, for the
// state API's listings. It is updated only after the commit that learned
// them is durable; the partition cores never read it (they learn specs from
// the store at restore, from their own commits and from SpecsKnown events).
type specRegistry struct {
	// initial is the durable specs at start, read by the cores' Reader;
	// never written after loadSpecs.
	initial map[address.TypeName][]partition.Spec

	mu    sync.RWMutex
	specs map[address.TypeName][]partition.Spec
}

func loadSpecs(db *store.DB) (*specRegistry, error) {
	r := &specRegistry{initial: map[address.TypeName][]partition.Spec{}, specs: map[address.TypeName][]partition.Spec{}}
	err := db.AllSpecs(func(t address.TypeName, specs []*protocol.FromFunction_PersistedValueSpec) error {
		s := specsFromProto(specs)
		r.initial[t] = s
		r.specs[t] = s
		return nil
	})
	return r, err
}

func (r *specRegistry) get(t address.TypeName) []partition.Spec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.specs[t]
}

func (r *specRegistry) set(t address.TypeName, s []partition.Spec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs[t] = s
}

// types returns every function type with registered states.
func (r *specRegistry) types() []address.TypeName {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]address.TypeName, 0, len(r.specs))
	for t := range r.specs {
		out = append(out, t)
	}
	return out
}

// publishSpecs runs once the commit in which partition from learned specs
// is durable: the listing shows them, and every other partition gets them
// as an event, so it needs no negotiation round trip of its own.
func (e *Engine) publishSpecs(from int, specs map[address.TypeName][]partition.Spec) {
	for t, s := range specs {
		e.specs.set(t, s)
		for i := 0; i < e.n; i++ {
			if p := e.part(i); p != nil && p.id != from {
				p.post(partition.SpecsKnown{Type: t, Specs: s})
			}
		}
	}
}

func specsFromProto(in []*protocol.FromFunction_PersistedValueSpec) []partition.Spec {
	out := make([]partition.Spec, len(in))
	for i, s := range in {
		out[i] = partition.Spec{
			Name:     s.GetStateName(),
			Typename: s.GetTypeTypename(),
			Mode:     partition.ExpireMode(s.GetExpirationSpec().GetMode()),
			TTL:      s.GetExpirationSpec().GetExpireAfterMillis(),
		}
	}
	return out
}

func specsToProto(in []partition.Spec) []*protocol.FromFunction_PersistedValueSpec {
	out := make([]*protocol.FromFunction_PersistedValueSpec, len(in))
	for i, s := range in {
		out[i] = &protocol.FromFunction_PersistedValueSpec{
			StateName:    s.Name,
			TypeTypename: s.Typename,
			ExpirationSpec: &protocol.FromFunction_ExpirationSpec{
				Mode:              protocol.FromFunction_ExpirationSpec_ExpireMode(s.Mode),
				ExpireAfterMillis: s.TTL,
			},
		}
	}
	return out
}

// storeReader is what a partition core reads: the durable store, and the
// specs that were durable when the engine started (immutable); p is the
// partition whose timers it reads.
type storeReader struct {
	db    *store.DB
	specs map[address.TypeName][]partition.Spec
	p     int
}

func (r storeReader) Timers(after *partition.TimerKey, fn func(partition.Timer) bool) error {
	var from *store.TimerKey
	if after != nil {
		k := timerKey(*after)
		k.Partition = r.p
		from = &k
	}
	return r.db.ScanTimersAfter(r.p, from, func(k store.TimerKey, env *protocol.Envelope) bool {
		return fn(partition.Timer{Key: partition.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}, Env: env})
	})
}

func (r storeReader) TimerByToken(sender, token string) (partition.TimerKey, bool, error) {
	k, ok, err := r.db.TimerByToken(r.p, sender, token)
	return partition.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}, ok, err
}

func (r storeReader) State(a address.Address, state string) (partition.Entry, bool, error) {
	e, ok, err := r.db.GetState(a, state)
	return partition.Entry{Typename: e.Typename, Value: e.Value, Version: e.Version, ExpiresAt: e.ExpiresAt}, ok, err
}

func (r storeReader) Specs(t address.TypeName) ([]partition.Spec, error) { return r.specs[t], nil }

func (r storeReader) AddressState(a address.Address) (map[string]partition.Entry, error) {
	out := map[string]partition.Entry{}
	err := r.db.ScanAddressState(a, func(state string, e store.Entry) error {
		out[state] = partition.Entry{Typename: e.Typename, Value: e.Value, Version: e.Version, ExpiresAt: e.ExpiresAt}
		return nil
	})
	return out, err
}
