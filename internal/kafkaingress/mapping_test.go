package kafkaingress

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
)

// A record keyed "." or ".." would make an id no URL path can carry (the
// state API and the console could never open it): it becomes a dead
// letter, dot-key; keys that merely contain dots are ids like any other.
func TestDotKeysAreDeadLetters(t *testing.T) {
	m, err := NewMapping(Config{ID: "kc/in", Brokers: []string{"127.0.0.1:9092"}, GroupID: "g",
		Routes: []Route{{Topic: "in", ValueType: "kc/text", Targets: []address.TypeName{{Namespace: "kc", Name: "counter"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{".": ReasonDotKey, "..": ReasonDotKey, "...": "", ".a": "", "a.": ""} {
		msgs, reason := m.Messages(&kgo.Record{Topic: "in", Key: []byte(key), Value: []byte("v")})
		if reason != want || (want == "") != (len(msgs) == 1) {
			t.Errorf("key %q: %d messages, reason %q; want reason %q", key, len(msgs), reason, want)
		}
	}
}
