// Package kafkatopic holds Kafka's rule for topic names, as brokers apply
// it: a name the broker would refuse (INVALID_TOPIC_EXCEPTION, on every
// attempt) is refused where it comes in instead — in module.yaml, or in a
// record a function sends to a Kafka egress.
package kafkatopic

import (
	"errors"
	"fmt"
)

// MaxLen is the longest topic name Kafka accepts, in bytes.
const MaxLen = 249

// Check returns why name is not a valid Kafka topic name, or nil. The
// error says only what is wrong; callers say which topic (see Quote).
func Check(name string) error {
	switch {
	case name == "":
		return errors.New("a topic must not be empty")
	case name == "." || name == "..":
		return errors.New(". and .. are not topic names")
	case len(name) > MaxLen:
		return fmt.Errorf("over Kafka's limit of %d characters", MaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errors.New("a topic name has only letters, digits, '.', '_' and '-'")
		}
	}
	return nil
}

// Quote quotes a topic name for a message, cut to its first 20 bytes when
// it is too long to be a topic anyway.
func Quote(name string) string {
	if len(name) > MaxLen {
		return fmt.Sprintf("%q...", name[:20])
	}
	return fmt.Sprintf("%q", name)
}
