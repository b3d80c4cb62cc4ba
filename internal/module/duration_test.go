package module

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"1500", 1500 * time.Millisecond}, // a bare number is milliseconds
		{"  42  ", 42 * time.Millisecond},
		{"10ms", 10 * time.Millisecond},
		{"10 milli", 10 * time.Millisecond},
		{"10millis", 10 * time.Millisecond},
		{"10 millisecond", 10 * time.Millisecond},
		{"10 milliseconds", 10 * time.Millisecond},
		{"30s", 30 * time.Second},
		{"30 sec", 30 * time.Second},
		{"30secs", 30 * time.Second},
		{"30 second", 30 * time.Second},
		{"30seconds", 30 * time.Second},
		{"2m", 2 * time.Minute},
		{"15min", 15 * time.Minute},
		{"1 min", time.Minute},
		{"1 minute", time.Minute},
		{"5 minutes", 5 * time.Minute},
		{"5h", 5 * time.Hour},
		{"1 hour", time.Hour},
		{"2hours", 2 * time.Hour},
		{"7d", 7 * 24 * time.Hour},
		{"1day", 24 * time.Hour},
		{"2 days", 48 * time.Hour},
		{"5ns", 5},
		{"5 nano", 5},
		{"5nanos", 5},
		{"5 nanosecond", 5},
		{"5 nanoseconds", 5},
		{"3µs", 3 * time.Microsecond},
		{"3us", 3 * time.Microsecond},
		{"3 micro", 3 * time.Microsecond},
		{"3micros", 3 * time.Microsecond},
		{"3 microsecond", 3 * time.Microsecond},
		{"3 microseconds", 3 * time.Microsecond},
		{"1 MIN", time.Minute}, // units are case-insensitive, as in Flink
		{"1Day", 24 * time.Hour},
		{"0007s", 7 * time.Second},
		{"9223372036854775807ns", time.Duration(1<<63 - 1)},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, msg string }{
		{"", "empty"},
		{"   ", "empty"},
		{"-1s", "must not be negative"},
		{"s", "want a number with an optional unit"},
		{"1.5s", "fractions are not allowed"},
		{"10 fortnights", `unknown unit "fortnights"`},
		{"10 s s", `unknown unit "s s"`},
		{"1e3", `unknown unit "e3"`},
		{"106752d", "too long"},
		{"99999999999999999999", "too long"},
	} {
		_, err := ParseDuration(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "module: ") {
			t.Errorf("ParseDuration(%q) error = %v, want one containing %q", tc.in, err, tc.msg)
		}
	}
}
