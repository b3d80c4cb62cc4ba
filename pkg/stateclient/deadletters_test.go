package stateclient_test

import (
	"errors"
	"testing"

	"github.com/statefun-go/statefun/internal/apptest"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

// Without dead letters the summary is empty and an ingress's listing an
// empty page (not an error, whether the module declares the ingress or
// not); an ingress id that is not <namespace>/<name> is refused before any
// request. The listing itself is tested with a Kafka ingress in
// cmd/statefun (TestStateDeadLetters) and internal/stateapi.
func TestDeadLettersEmptyAndInvalid(t *testing.T) {
	rt := apptest.Start(t)
	c := rt.Client(t)
	sum, err := c.DeadLetterSummary(ctx)
	if err != nil || sum == nil || len(sum) != 0 {
		t.Fatalf("summary %v %v", sum, err)
	}
	p, err := c.DeadLetters(ctx, stateclient.TypeName{Namespace: "shop", Type: "logins"}, stateclient.DeadLetterFilter{Topic: "t"}, "", 10)
	if err != nil || p.DeadLetters == nil || len(p.DeadLetters) != 0 || p.Next != "" {
		t.Fatalf("page %+v %v", p, err)
	}
	for _, in := range []stateclient.TypeName{{Namespace: "", Type: "x"}, {Namespace: "a/b", Type: "x"}, {Namespace: "a", Type: "\xff"}} {
		if _, err := c.DeadLetters(ctx, in, stateclient.DeadLetterFilter{}, "", 0); !errors.Is(err, stateclient.ErrInvalidAddress) {
			t.Errorf("%q: %v", in, err)
		}
	}
	if _, err := c.DeadLetters(ctx, stateclient.TypeName{Namespace: "a", Type: "b"}, stateclient.DeadLetterFilter{}, "", -1); err == nil {
		t.Error("a negative limit was sent")
	}
	// A bad filter comes back as the server's 400.
	var perr *stateclient.ProblemError
	if _, err := c.DeadLetters(ctx, stateclient.TypeName{Namespace: "a", Type: "b"}, stateclient.DeadLetterFilter{}, "not-a-cursor", 0); !errors.As(err, &perr) || perr.Status != 400 {
		t.Errorf("bad cursor: %v", err)
	}
}
