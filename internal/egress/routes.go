package egress

import (
	"fmt"
	"sort"
	"strings"

	"github.com/statefun-go/statefun/internal/protocol"
)

// RouteFunc checks a record a function sends to one egress and returns its
// route: the outbox queue of that egress it waits in. It has the signature
// of partition.Config.Egress and must be pure (the partition core calls it
// while validating a response); an error makes the response a protocol
// violation.
type RouteFunc func(namespace, typ string, arg *protocol.TypedValue) (route string, err error)

// Routes sends each record to the RouteFunc of its egress id, so that the
// egresses of a module — the playground egress and any number of Kafka
// egresses — each check their own records. A record for an id no egress is
// bound to is refused, naming the ids that are bound.
type Routes struct {
	byID map[string]RouteFunc
}

// NewRoutes returns an empty Routes: it refuses every record until egresses
// are added.
func NewRoutes() *Routes { return &Routes{byID: map[string]RouteFunc{}} }

// Add binds an egress id ("namespace/type") to its RouteFunc. An empty id,
// a nil function or an id bound twice is an error (module.yaml declares
// each egress once).
func (rs *Routes) Add(id string, f RouteFunc) error {
	if f == nil {
		return fmt.Errorf("egress: no router for egress %s", id)
	}
	ns, typ, ok := strings.Cut(id, "/")
	if !ok || ns == "" || typ == "" {
		return fmt.Errorf("egress: egress id %q is not namespace/type", id)
	}
	if _, dup := rs.byID[id]; dup {
		return fmt.Errorf("egress: egress %s is bound twice", id)
	}
	rs.byID[id] = f
	return nil
}

// Route implements partition.Config.Egress.
func (rs *Routes) Route(namespace, typ string, arg *protocol.TypedValue) (string, error) {
	f, ok := rs.byID[egressID(namespace, typ)]
	if !ok {
		return "", fmt.Errorf("unknown egress %s/%s (module.yaml binds %s)", namespace, typ, rs.bound())
	}
	return f(namespace, typ, arg)
}

// egressID is namespace/typ. Only looked up, it stays off the heap (a
// short concatenation that does not escape is built on the stack): this
// runs for every record a function sends to an egress.
func egressID(namespace, typ string) string { return namespace + "/" + typ }

func (rs *Routes) bound() string {
	if len(rs.byID) == 0 {
		return "no egress"
	}
	ids := make([]string, 0, len(rs.byID))
	for id := range rs.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}
