package stateapi

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

// GET /failing?group=error answers with the failing addresses grouped by
// function type and error: a function server that is down, or one bug met
// by thousands of addresses, is one row with a count, not thousands of
// rows to page through. The error is compared with what varies between
// addresses taken out: the address's id, and numbers.

// failingGroupJSON is one group of GET /failing?group=error.
type failingGroupJSON struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	// Error is the group's error, the id and numbers of one address's
	// replaced by <id> and N.
	Error string `json:"error"`
	// Example is one address's error as it is.
	Example   string    `json:"example"`
	Violation bool      `json:"violation"`
	Addresses int       `json:"addresses"`
	Paused    int       `json:"paused"`
	Since     time.Time `json:"since"` // the oldest address's
	// Sample lists up to maxGroupSample ids of the group, in order.
	Sample []string `json:"sample"`
}

// maxGroupSample bounds the ids a group lists.
const maxGroupSample = 5

var digitRuns = regexp.MustCompile(`[0-9]+`)

// errorClass is the error of a failing address with what varies between
// addresses of one failure taken out.
func errorClass(lastError, id string) string {
	if id != "" {
		lastError = replaceWord(lastError, id, "<id>")
	}
	return digitRuns.ReplaceAllString(lastError, "N")
}

// replaceWord replaces the occurrences of word in s that stand alone (not
// inside a longer run of letters, digits, '_' or '-'), so that a short id
// such as "a" is not taken out of every word it is a letter of.
func replaceWord(s, word, with string) string {
	inWord := func(r byte) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
	}
	var b strings.Builder
	for {
		i := strings.Index(s, word)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(word)
		if (i > 0 && inWord(s[i-1])) || (end < len(s) && inWord(s[end])) {
			b.WriteString(s[:end])
		} else {
			b.WriteString(s[:i])
			b.WriteString(with)
		}
		s = s[end:]
	}
}

// failingGroups groups failing addresses by type and error class.
func failingGroups(list []failingJSON) []failingGroupJSON {
	byKey := map[string]*failingGroupJSON{}
	var keys []string
	for _, f := range list {
		class := errorClass(f.LastError, f.ID)
		k := f.Namespace + "\x00" + f.Type + "\x00" + class
		g := byKey[k]
		if g == nil {
			g = &failingGroupJSON{Namespace: f.Namespace, Type: f.Type, Error: class, Example: f.LastError, Violation: f.Violation, Since: f.Since, Sample: []string{}}
			byKey[k] = g
			keys = append(keys, k)
		}
		g.Addresses++
		if f.Paused {
			g.Paused++
		}
		if f.Since.Before(g.Since) {
			g.Since = f.Since
		}
		if len(g.Sample) < maxGroupSample {
			g.Sample = append(g.Sample, f.ID)
		}
	}
	sort.Strings(keys)
	out := make([]failingGroupJSON, 0, len(keys))
	for _, k := range keys {
		out = append(out, *byKey[k])
	}
	return out
}

// failingGroupsListing merges the groups of several nodes: the same group
// on two nodes (its addresses in partitions of both) is one, its counts
// summed.
func failingGroupsListing() listing {
	return listing{field: "groups",
		key: func(item json.RawMessage) (string, error) {
			var g failingGroupJSON
			err := json.Unmarshal(item, &g)
			return g.Namespace + "\x00" + g.Type + "\x00" + g.Error, err
		},
		combine: func(a, b json.RawMessage) json.RawMessage {
			var x, y failingGroupJSON
			json.Unmarshal(a, &x)
			json.Unmarshal(b, &y)
			x.Addresses += y.Addresses
			x.Paused += y.Paused
			if y.Since.Before(x.Since) {
				x.Since = y.Since
			}
			x.Sample = append(x.Sample, y.Sample...)
			slices.Sort(x.Sample)
			x.Sample = slices.Compact(x.Sample)
			if len(x.Sample) > maxGroupSample {
				x.Sample = x.Sample[:maxGroupSample]
			}
			out, _ := json.Marshal(x)
			return out
		}}
}

// serveFailingGroups answers GET /failing?group=error for the addresses of
// type t (all types when zero).
func (s *Server) serveFailingGroups(w http.ResponseWriter, r *http.Request, t address.TypeName) {
	if s.gather(w, r, failingGroupsListing()) {
		return
	}
	own := s.localPart(w, r)
	list, err := s.eng.Failing(r.Context(), t)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	var mine []failingJSON
	for _, f := range list {
		if own != nil && !own[s.partitionOf(f.Addr)] {
			continue
		}
		mine = append(mine, failingJSON{Namespace: f.Addr.Type.Namespace, Type: f.Addr.Type.Name, ID: f.Addr.ID,
			Since: ms(f.Since), LastError: f.LastError, Violation: f.Violation, Paused: f.Paused})
	}
	writeJSON(w, http.StatusOK, struct {
		Groups []failingGroupJSON `json:"groups"`
		Next   *string            `json:"next"`
	}{Groups: failingGroups(mine)})
}
