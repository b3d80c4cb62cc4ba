package kafkatopic

import (
	"strings"
	"testing"
)

// Names brokers accept pass; each kind of name they refuse is refused with
// its reason.
func TestCheck(t *testing.T) {
	for _, ok := range []string{"logins", "a.b_c-D9", strings.Repeat("t", MaxLen)} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                            "must not be empty",
		".":                           ". and ..",
		"..":                          ". and ..",
		strings.Repeat("t", MaxLen+1): "over Kafka's limit of 249",
		"a/b":                         "only letters",
		"ünï":                         "only letters",
		"a b":                         "only letters",
	} {
		if err := Check(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%.30q) = %v, want an error saying %q", name, err, want)
		}
	}
	if q := Quote(strings.Repeat("x", 300)); len(q) > 30 {
		t.Errorf("Quote of a 300-byte name is %d bytes long", len(q))
	}
}
