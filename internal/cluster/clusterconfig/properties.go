package clusterconfig

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/kafkaclient"
	"github.com/statefun-go/statefun/internal/module"
)

// PropertyFlag is the name property errors carry for a property given as
// --cluster-property key=value.
const PropertyFlag = "--cluster-property"

// ParsePropertyFlag reads one --cluster-property value, key=value. The
// value may contain '=' (a JAAS line does).
func ParsePropertyFlag(s string) (module.KafkaProperty, error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t:") {
		// Only what comes before '=' is shown: the value may be a secret,
		// and so may a whole argument that has no '='.
		shown := strconv.Quote(k)
		if !ok {
			shown = strconv.Quote(s)
			if kafkaclient.Sensitive(s) {
				shown = "(value hidden)"
			}
		}
		return module.KafkaProperty{}, fmt.Errorf("cluster: %s %s: want key=value with a Kafka client property name, e.g. security.protocol=SASL_SSL", PropertyFlag, shown)
	}
	pos := module.Position{File: PropertyFlag}
	return module.KafkaProperty{Key: k, Value: v, Pos: pos, ValuePos: pos}, nil
}

// ParseProperties reads a Java properties file, the format Kafka's client
// configuration files use (client.properties): key=value, key: value or
// key value lines; # and ! start comments; a line ending in a backslash
// continues on the next (as a multi-line sasl.jaas.config does); \t, \n,
// \r, \f, \uXXXX and \<char> escapes. Each property carries name and the
// line it starts on. A key set twice is an error, as in module.yaml.
func ParseProperties(name string, data []byte) ([]module.KafkaProperty, error) {
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	var (
		props []module.KafkaProperty
		errs  module.Errors
		seen  = map[string]int{}
	)
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		// Join continuation lines: an odd number of trailing backslashes.
		for trailingBackslashes(line)%2 == 1 && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		if trailingBackslashes(line)%2 == 1 {
			line = line[:len(line)-1]
		}
		key, value := splitProperty(line)
		k, err := unescape(key)
		if err == nil {
			value, err = unescape(value)
		}
		pos := module.Position{File: name, Line: start, Column: 1 + len(lines[start-1]) - len(strings.TrimLeft(lines[start-1], " \t\f"))}
		switch {
		case err != nil:
			errs = append(errs, &module.Error{File: name, Line: start, Column: pos.Column, Msg: err.Error()})
			continue
		case k == "":
			errs = append(errs, &module.Error{File: name, Line: start, Column: pos.Column, Msg: "a property without a key; want key=value"})
			continue
		}
		if first, ok := seen[k]; ok {
			errs = append(errs, &module.Error{File: name, Line: start, Column: pos.Column, Field: k, Msg: fmt.Sprintf("set twice (first on line %d)", first)})
			continue
		}
		seen[k] = start
		props = append(props, module.KafkaProperty{Key: k, Value: value, Pos: pos, ValuePos: pos})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return props, nil
}

func trailingBackslashes(s string) int {
	n := 0
	for n < len(s) && s[len(s)-1-n] == '\\' {
		n++
	}
	return n
}

// splitProperty splits a logical line at the first unescaped '=', ':' or
// whitespace; whitespace around the separator is dropped.
func splitProperty(line string) (key, value string) {
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			break
		}
	}
	if i >= len(line) {
		return line, ""
	}
	key, rest := line[:i], strings.TrimLeft(line[i:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return key, rest
}

// unescape resolves the escapes of a properties key or value.
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf(`malformed \uXXXX escape`)
			}
			n, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf(`malformed \uXXXX escape`)
			}
			b.WriteRune(rune(n))
			i += 4
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
