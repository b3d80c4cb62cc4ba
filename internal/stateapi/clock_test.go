package stateapi

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idForm is a mutation id's form: milliseconds in base 36, a counter and
// a random tail in 8 hex digits each.
var idForm = regexp.MustCompile(`^[0-9a-z]+-[0-9a-f]{8}-[0-9a-f]{8}$`)

// TestMutationIDsTakeTheInjectedClock: mutation ids are named by
// Options.Now, not the wall clock, and stay unique and in creation order
// when the clock stands still; a clock before 1970 counts as 1970.
func TestMutationIDsTakeTheInjectedClock(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	for _, c := range []struct {
		now    time.Time
		prefix string
	}{
		{time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC), strconv.FormatInt(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC).UnixMilli(), 36) + "-"},
		{time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), "0-"},
	} {
		api := serve(t, eng, Options{Now: func() time.Time { return c.now }})
		var ids []string
		for i := range 20 {
			rc := mustPut(t, api, fmt.Sprintf("/state/clk/t/id/s%d", i%3), "application/octet-stream", "v", "Statefun-Type", "x/T")
			ids = append(ids, rc.Mutation)
		}
		for _, id := range ids {
			if !idForm.MatchString(id) {
				t.Errorf("the id %s is not <ms base 36>-<8 hex digits>-<8 hex digits>", id)
			}
			if !strings.HasPrefix(id, c.prefix) {
				t.Errorf("clock %v: the id %s does not start with %s", c.now, id, c.prefix)
			}
		}
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Errorf("clock %v: ids are not unique and in creation order: %q", c.now, ids)
		}
	}
}
