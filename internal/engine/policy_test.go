package engine

import (
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
)

func TestParsePauseAfter(t *testing.T) {
	f, err := ParsePauseAfter("ns/type=5, ns/*=3,*=10")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		t    address.TypeName
		want int
	}{
		{address.TypeName{Namespace: "ns", Name: "type"}, 5},
		{address.TypeName{Namespace: "ns", Name: "other"}, 3},
		{address.TypeName{Namespace: "x", Name: "y"}, 10},
	} {
		if got := f(c.t); got != c.want {
			t.Errorf("%s: %d, want %d", c.t, got, c.want)
		}
	}
	if f, err := ParsePauseAfter(""); f != nil || err != nil {
		t.Errorf("empty: %v", err)
	}
	f, _ = ParsePauseAfter("ns/type=2")
	if f(address.TypeName{Namespace: "a", Name: "b"}) != 0 {
		t.Error("an unnamed type must keep retrying (0)")
	}
	for _, bad := range []string{"ns/type", "ns/type=0", "ns/type=x", "ns=3", "/t=1", "ns/t/u=1", "n*/t=1", "ns/t*=1"} {
		if _, err := ParsePauseAfter(bad); err == nil || !strings.Contains(err.Error(), "--pause-after") {
			t.Errorf("%q: %v, want an error naming the flag", bad, err)
		}
	}
}
