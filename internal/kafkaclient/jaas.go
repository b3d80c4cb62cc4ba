package kafkaclient

import (
	"errors"
	"fmt"
	"strings"
)

// JAAS is one parsed sasl.jaas.config: a login module, its control flag
// and its options. Options may hold credentials.
type JAAS struct {
	LoginModule string
	Flag        string
	Options     map[string]string
}

// ErrJAAS is wrapped by ParseJAAS's errors. They say where the text is
// malformed but never quote it: it holds credentials.
var ErrJAAS = errors.New("kafkaclient: invalid sasl.jaas.config")

// ParseJAAS parses the Kafka client form of a JAAS configuration, one login
// module with its options:
//
//	org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="secret";
//
// Option values are double-quoted (with \" and \\ escapes) or bare words.
// The final ';' is required, as in Kafka.
func ParseJAAS(s string) (*JAAS, error) {
	fail := func(i int, what string) error {
		return fmt.Errorf("%w: %s at character %d; want <LoginModule> required username=\"...\" password=\"...\";", ErrJAAS, what, i+1)
	}
	i := 0
	skip := func() {
		for i < len(s) && strings.ContainsRune(" \t\r\n", rune(s[i])) {
			i++
		}
	}
	word := func() string {
		start := i
		for i < len(s) && !strings.ContainsRune(" \t\r\n=;\"", rune(s[i])) {
			i++
		}
		return s[start:i]
	}
	skip()
	j := &JAAS{Options: make(map[string]string)}
	if j.LoginModule = word(); j.LoginModule == "" {
		return nil, fail(i, "no login module")
	}
	skip()
	j.Flag = strings.ToLower(word())
	switch j.Flag {
	case "required", "requisite", "sufficient", "optional":
	default:
		return nil, fail(i, "the control flag is missing (required, requisite, sufficient or optional)")
	}
	for {
		skip()
		if i >= len(s) {
			return nil, fail(i, "the closing ';' is missing")
		}
		if s[i] == ';' {
			i++
			break
		}
		keyAt := i
		key := word()
		if key == "" {
			return nil, fail(i, "an option name is missing")
		}
		skip()
		if i >= len(s) || s[i] != '=' {
			return nil, fail(i, "'=' is missing after an option name")
		}
		i++
		skip()
		var val string
		if i < len(s) && s[i] == '"' {
			var b strings.Builder
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				i++
				if c == '\\' && i < len(s) {
					b.WriteByte(s[i])
					i++
					continue
				}
				if c == '"' {
					closed = true
					break
				}
				b.WriteByte(c)
			}
			if !closed {
				return nil, fail(i-1, "a quoted value is not closed")
			}
			val = b.String()
		} else {
			val = word()
			if val == "" {
				return nil, fail(i, "a value is missing")
			}
		}
		if _, dup := j.Options[key]; dup {
			return nil, fail(keyAt, fmt.Sprintf("option %q is set twice", key))
		}
		j.Options[key] = val
	}
	skip()
	if i < len(s) {
		return nil, fail(i, "a second login module follows (a Kafka client takes exactly one)")
	}
	return j, nil
}
