package jobs

import (
	"context"
	"encoding/base64"
	"encoding/json"

	"github.com/statefun-go/statefun/internal/address"
	stypes "github.com/statefun-go/statefun/internal/types"
)

// MaxPreviewEntries caps the entries a preview looks at; past it the
// preview says it is truncated.
const MaxPreviewEntries = 1_000_000

// MaxSample caps a preview's sample of diffs.
const MaxSample = 100

// Preview is what a job would do, computed without writing anything.
type Preview struct {
	// Counts: Changed counts the entries that would be written.
	Counts Counts `json:"counts"`
	// Sample is the first diffs, in the order the job would write them.
	Sample []Diff `json:"sample"`
	// Failures are the first entries the job could not compute.
	Failures []Problem `json:"failures"`
	// Truncated says the preview stopped at MaxPreviewEntries.
	Truncated bool `json:"truncated"`
}

// Diff is one entry before and after.
type Diff struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	State     string `json:"state"`
	Version   uint64 `json:"version"`
	Before    Image  `json:"before"`
	// After is null for a deletion.
	After *Image `json:"after"`
}

// Image is a value as the API shows one: JSON where the type has a JSON
// form, and the exact bytes.
type Image struct {
	Typename    string          `json:"typename"`
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 string          `json:"valueBase64"`
}

func imageOf(typename string, value []byte) Image {
	im := Image{Typename: typename, ValueBase64: base64.StdEncoding.EncodeToString(value)}
	if v, ok, err := stypes.JSONValue(typename, value); err == nil && ok {
		im.Value = v
	}
	return im
}

// preview walks what c selects and evaluates each entry.
func (m *Manager) preview(ctx context.Context, c *compiled, sample int, principal string) (*Preview, error) {
	sample = min(max(sample, 0), MaxSample)
	p := &Preview{Sample: []Diff{}, Failures: []Problem{}}
	rn := &run{m: m, c: c, rec: &Record{Principal: principal}}
	types, err := rn.types()
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		for {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			items, last, more, err := rn.nextPage(t)
			if err != nil || last == nil {
				if err != nil {
					return nil, err
				}
				break
			}
			for _, it := range items {
				if p.Counts.Scanned == MaxPreviewEntries {
					p.Truncated = true
					return p, nil
				}
				m.previewEntry(c, it, p, sample)
			}
			if !more {
				break
			}
			rn.rec.Cursor = Cursor{Namespace: t.Namespace, Type: t.Name, ID: last.ID, State: last.State}
		}
	}
	return p, nil
}

func (m *Manager) previewEntry(c *compiled, it item, p *Preview, sample int) {
	p.Counts.Scanned++
	if !m.stateSelected(c, it) {
		return
	}
	out, err := m.evaluate(c, it)
	switch {
	case err != nil:
		p.Counts.Matched++
		p.Counts.Failed++
		p.Failures = appendListed(p.Failures, problem(it, it.entry.Version, err.Error(), ""))
		return
	case !out.selected:
		return
	}
	p.Counts.Matched++
	if out.unchanged {
		p.Counts.Unchanged++
		return
	}
	p.Counts.Changed++
	if len(p.Sample) < sample {
		d := Diff{Namespace: it.addr.Type.Namespace, Type: it.addr.Type.Name, ID: it.addr.ID, State: it.state,
			Version: it.entry.Version, Before: imageOf(it.entry.Typename, it.entry.Value)}
		if !out.delete {
			im := imageOf(out.typename, out.value)
			d.After = &im
		}
		p.Sample = append(p.Sample, d)
	}
}

// total counts the entries a job looks at, for its progress: the entries
// of the selected ids (at most MaxPreviewEntries counted).
func (m *Manager) total(c *compiled, principal string) (int64, error) {
	st := m.storeAs(principal)
	var types []address.TypeName
	if c.typ != nil {
		types = []address.TypeName{*c.typ}
	} else if err := st.ScanTypes(func(t address.TypeName) bool { types = append(types, t); return true }); err != nil {
		return 0, err
	}
	var n int64
	for _, t := range types {
		stats, err := st.StateStatsOf(t, MaxPreviewEntries, c.spec.Select.keepID)
		if err != nil {
			return 0, err
		}
		n += int64(stats.Entries)
	}
	return n, nil
}
