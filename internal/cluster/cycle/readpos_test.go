package cycle

import (
	"strings"
	"testing"
)

// Where a restored partition resumes the messages topic: after its own
// read position when Kafka still has it; at the start when retention
// deleted records it never applied (an error naming how many); and with
// the position dropped when the topic ends before it (recreated or
// truncated), so that new records below it are not skipped as applied.
func TestResumeAt(t *testing.T) {
	// at is a stored position: the last offset applied.
	type position struct {
		next int64
		has  bool
	}
	at := func(applied int64) position { return position{applied + 1, true} }
	for _, c := range []struct {
		name       string
		stored     position
		start, end int64
		want       Resume
		fault      string
	}{
		{name: "none", stored: position{}, start: 0, end: 50, want: Resume{At: -1}},
		{name: "behind the end", stored: at(41), start: 0, end: 50, want: Resume{At: 42}},
		{name: "at the end", stored: at(49), start: 10, end: 50, want: Resume{At: 50}},
		{name: "the start at its next", stored: at(9), start: 10, end: 50, want: Resume{At: 10}},
		{name: "below the start", stored: at(4), start: 10, end: 50, want: Resume{At: 10, Kind: "below-start"}, fault: "5 records were deleted by retention"},
		{name: "past the end", stored: at(60), start: 0, end: 50, want: Resume{At: -1, Forget: true, Kind: "past-end"}, fault: "ends at 50: it was recreated or truncated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ResumeAt(3, c.stored.next, c.stored.has, c.start, c.end)
			if !strings.Contains(got.Fault, c.fault) || (got.Fault == "") != (c.fault == "") {
				t.Errorf("fault %q; want one saying %q", got.Fault, c.fault)
			}
			got.Fault = ""
			if got != c.want {
				t.Errorf("ResumeAt = %+v; want %+v", got, c.want)
			}
		})
	}
}
