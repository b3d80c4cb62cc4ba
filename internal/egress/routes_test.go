package egress

import (
	"errors"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// Routes sends each record to the router of its own egress and refuses an
// unbound id naming every id that is bound.
func TestRoutesComposePlaygroundAndOthers(t *testing.T) {
	rs := NewRoutes()
	if err := rs.Add(PlaygroundID, NewRouter([]string{"greets"}).Route); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("not a kafka record")
	if err := rs.Add("example/kafka", func(ns, typ string, arg *protocol.TypedValue) (string, error) {
		if arg.GetTypename() != "k/rec" {
			return "", refuse
		}
		return ns + "/" + typ, nil
	}); err != nil {
		t.Fatal(err)
	}

	route, err := rs.Route("io.statefun.playground", "egress", &protocol.TypedValue{Typename: RecordTypename, HasValue: true,
		Value: []byte(`{"topic":"greets","payload":"hi"}`)})
	if err != nil || route != "greets" {
		t.Fatalf("playground record: route %q, %v", route, err)
	}
	route, err = rs.Route("example", "kafka", &protocol.TypedValue{Typename: "k/rec"})
	if err != nil || route != "example/kafka" {
		t.Fatalf("kafka record: route %q, %v", route, err)
	}
	if _, err := rs.Route("example", "kafka", &protocol.TypedValue{Typename: "other"}); !errors.Is(err, refuse) {
		t.Fatalf("the kafka router's refusal was not passed on: %v", err)
	}
	_, err = rs.Route("example", "gone", &protocol.TypedValue{Typename: "k/rec"})
	if err == nil || !strings.Contains(err.Error(), "unknown egress example/gone (module.yaml binds example/kafka, io.statefun.playground/egress)") {
		t.Fatalf("unknown egress: %v", err)
	}
	if _, err := NewRoutes().Route("a", "b", nil); err == nil || !strings.Contains(err.Error(), "binds no egress") {
		t.Fatalf("no egress bound: %v", err)
	}
}

func TestRoutesAddRefusesBadBindings(t *testing.T) {
	rs := NewRoutes()
	ok := func(string, string, *protocol.TypedValue) (string, error) { return "", nil }
	if err := rs.Add("a/b", ok); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		f    RouteFunc
		want string
	}{
		{"a/b", ok, "bound twice"},
		{"ab", ok, "not namespace/type"},
		{"/b", ok, "not namespace/type"},
		{"c/d", nil, "no router"},
	} {
		if err := rs.Add(c.id, c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%q): %v, want %q", c.id, err, c.want)
		}
	}
}
