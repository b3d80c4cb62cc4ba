package module

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationUnits maps the unit labels of Flink's TimeUtils.parseDuration to
// their length. Labels are matched after lower-casing. "us" and the Greek
// "μs" are extensions: Flink only knows the micro sign "µs".
var durationUnits = map[string]time.Duration{
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"h": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"ms": time.Millisecond, "milli": time.Millisecond, "millis": time.Millisecond,
	"millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"µs": time.Microsecond, "μs": time.Microsecond, "us": time.Microsecond,
	"micro": time.Microsecond, "micros": time.Microsecond,
	"microsecond": time.Microsecond, "microseconds": time.Microsecond,
	"ns": time.Nanosecond, "nano": time.Nanosecond, "nanos": time.Nanosecond,
	"nanosecond": time.Nanosecond, "nanoseconds": time.Nanosecond,
}

const durationUnitList = "d, day(s), h, hour(s), m, min, minute(s), s, sec(s), second(s), " +
	"ms, milli(s), millisecond(s), µs, us, micro(s), microsecond(s), ns, nano(s), nanosecond(s)"

// ParseDuration parses a duration the way StateFun does (Flink's
// TimeUtils.parseDuration): a non-negative integer, optional spaces, and an
// optional case-insensitive unit such as "ms", "s", "sec", "seconds", "m",
// "min", "minute", "h", "d" or "day". A bare number is milliseconds. Examples:
// "1 min", "15min", "2m", "1day", "30seconds", "500".
//
// It returns an error prefixed "module: " when s is empty, negative,
// fractional, has an unknown unit, or does not fit in a time.Duration.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, errors.New("module: " + err.Error())
	}
	return d, nil
}

// parseDuration is ParseDuration with errors meant to follow a field name,
// so without the package prefix.
func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("invalid duration: empty")
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, label := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if t[0] == '-' {
			return 0, errors.New("invalid duration " + strconv.Quote(s) + ": must not be negative")
		}
		return 0, errors.New("invalid duration " + strconv.Quote(s) + ": want a number with an optional unit, such as \"30s\" or \"2 min\"")
	}
	if strings.HasPrefix(label, ".") {
		return 0, errors.New("invalid duration " + strconv.Quote(s) + ": fractions are not allowed; use a smaller unit, such as \"1500ms\" for 1.5s")
	}
	unit := time.Millisecond
	if label != "" {
		u, ok := durationUnits[label]
		if !ok {
			return 0, errors.New("invalid duration " + strconv.Quote(s) + ": unknown unit " +
				strconv.Quote(label) + "; known units: " + durationUnitList)
		}
		unit = u
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v > math.MaxInt64/int64(unit) {
		return 0, errors.New("invalid duration " + strconv.Quote(s) + ": too long")
	}
	return time.Duration(v) * unit, nil
}
