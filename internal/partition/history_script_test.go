package partition

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// describeCauses renders the cause of each state write of a commit, for
// "ready causes" in the scripts (testdata/history.txt).
func describeCauses(c *Commit) string {
	var b strings.Builder
	for _, w := range c.State {
		fmt.Fprintf(&b, "  cause %s %s at=%d: %s\n", w.Addr, w.State, w.At, w.Cause)
	}
	return b.String()
}

// parseImage reads the image of "mutate op=restore": one line per entry,
// "name value=v version=epoch.count [type=t]" or "name absent".
func parseImage(t *testing.T, d *datadriven.TestData) []RestoreEntry {
	var out []RestoreEntry
	for _, line := range lines(d.Input) {
		name, args := parseLine(line)
		if _, ok := args["absent"]; ok {
			out = append(out, RestoreEntry{State: name, Absent: true})
			continue
		}
		r := RestoreEntry{State: name, Typename: defaultTypename, Value: []byte(args["value"])}
		if v, ok := args["type"]; ok {
			r.Typename = v
		}
		epoch, n, _ := strings.Cut(args["version"], ".")
		e, err1 := strconv.ParseUint(epoch, 10, 64)
		c, err2 := strconv.ParseUint(n, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: image line %q: version=epoch.count", d.Pos, line)
		}
		r.Version = e*versionEpoch + c
		out = append(out, r)
	}
	return out
}
