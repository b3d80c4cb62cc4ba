package jobs

import (
	"context"
	"slices"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/store"
)

// Orphans are state entries nobody owns any more: of a function type
// module.yaml no longer binds to an endpoint, or of a state name the
// type's function no longer registers. The runtime learns what a function
// registers from its answers (the specs kept in store key space 0x05):
// until a deployed type has answered once, none of its state is called an
// orphan.

// Orphan is the orphaned state of one type: the whole type (State empty,
// Reason ReasonType) or one state name (ReasonState).
type Orphan struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	IDs       int64  `json:"ids"`
	Entries   int64  `json:"entries"`
	// Bytes counts the keys and values of the entries.
	Bytes int64 `json:"bytes"`
}

// Reasons an entry is an orphan.
const (
	ReasonType  = "type-not-deployed"
	ReasonState = "state-not-registered"
)

// Orphans is the answer of ListOrphans.
type Orphans struct {
	Orphans []Orphan `json:"orphans"`
	// Complete is false when the scan stopped at MaxPreviewEntries.
	Complete bool `json:"complete"`
}

// orphan reports whether an entry of type t named state is an orphan.
func (m *Manager) orphan(t address.TypeName, state string) bool {
	if !m.cfg.Deployed(t) {
		return true
	}
	specs := m.cfg.Engine.SpecsOf(t)
	return len(specs) > 0 && !slices.ContainsFunc(specs, func(s partition.Spec) bool { return s.Name == state })
}

// ListOrphans counts the orphaned state of every type holding state in
// the local store (Config.Local); in cluster mode that of the partitions
// this node owns, which the state API adds up over every node.
func (m *Manager) ListOrphans(ctx context.Context) (*Orphans, error) {
	out := &Orphans{Orphans: []Orphan{}, Complete: true}
	local := m.cfg.Local
	var keep func(id string) bool
	if m.cfg.Owned != nil {
		own := map[int]bool{}
		for _, p := range m.cfg.Owned() {
			own[p] = true
		}
		n := m.cfg.Engine.Partitions()
		// The store may also hold stale copies of partitions this node
		// owned before: not its to count.
		keep = func(id string) bool { return own[address.Partition(id, n)] }
	}
	var types []address.TypeName
	if err := local.ScanTypes(func(t address.TypeName) bool { types = append(types, t); return true }); err != nil {
		return nil, err
	}
	scanned := 0
	for _, t := range types {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !m.cfg.Deployed(t) {
			st, err := local.StateStatsOf(t, MaxPreviewEntries, keep)
			if err != nil {
				return nil, err
			}
			if st.Entries == 0 {
				continue // only in partitions of other nodes
			}
			out.Complete = out.Complete && st.Complete
			out.Orphans = append(out.Orphans, Orphan{Namespace: t.Namespace, Type: t.Name, Reason: ReasonType,
				IDs: int64(st.IDs), Entries: int64(st.Entries), Bytes: st.Bytes})
			continue
		}
		if len(m.cfg.Engine.SpecsOf(t)) == 0 {
			continue
		}
		byState := map[string]*Orphan{}
		lastID := map[string]string{}
		var serr error
		err := local.ScanIDs(t, "", "", func(id string) bool {
			if keep != nil && !keep(id) {
				return true
			}
			a := address.Address{Type: t, ID: id}
			serr = local.ScanAddressState(a, func(state string, e store.Entry) error {
				scanned++
				if !m.orphan(t, state) {
					return nil
				}
				o := byState[state]
				if o == nil {
					o = &Orphan{Namespace: t.Namespace, Type: t.Name, State: state, Reason: ReasonState}
					byState[state] = o
				}
				o.Entries++
				o.Bytes += int64(len(id) + len(state) + len(t.Namespace) + len(t.Name) + len(e.Value) + len(e.Typename) + 16)
				if lastID[state] != id {
					o.IDs++
					lastID[state] = id
				}
				return nil
			})
			if serr != nil || scanned >= MaxPreviewEntries {
				out.Complete = out.Complete && scanned < MaxPreviewEntries
				return false
			}
			return true
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return nil, err
		}
		states := make([]string, 0, len(byState))
		for s := range byState {
			states = append(states, s)
		}
		slices.Sort(states)
		for _, s := range states {
			out.Orphans = append(out.Orphans, *byState[s])
		}
	}
	return out, nil
}
