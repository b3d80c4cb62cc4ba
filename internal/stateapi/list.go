package stateapi

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

type entryInfo struct {
	State      string     `json:"state"`
	Typename   string     `json:"typename"`
	Size       int        `json:"size"`
	Version    string     `json:"version"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	Registered bool       `json:"registered"`
}

type specInfo struct {
	State       string `json:"state"`
	Typename    string `json:"typename"`
	Expiration  string `json:"expiration"`
	ExpireAfter string `json:"expireAfter,omitempty"`
}

// listEntries answers GET /state/<ns>/<type>/<id>: the entries that hold a
// value (applied state, like a read) and the states the type registered.
func (s *Server) listEntries(w http.ResponseWriter, r *http.Request, a address.Address) {
	rep, err := s.eng.Read(r.Context(), a, "")
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	out := struct {
		Namespace  string      `json:"namespace"`
		Type       string      `json:"type"`
		ID         string      `json:"id"`
		Entries    []entryInfo `json:"entries"`
		Registered []specInfo  `json:"registered"`
	}{Namespace: a.Type.Namespace, Type: a.Type.Name, ID: a.ID, Entries: []entryInfo{}, Registered: []specInfo{}}
	for _, e := range rep.Entries {
		info := entryInfo{State: e.State, Typename: e.Entry.Typename, Size: len(e.Entry.Value),
			Version: strconv.FormatUint(e.Entry.Version, 10), Registered: e.Spec != nil}
		if e.Entry.ExpiresAt != 0 {
			t := time.UnixMilli(e.Entry.ExpiresAt).UTC()
			info.ExpiresAt = &t
		}
		out.Entries = append(out.Entries, info)
	}
	for _, sp := range rep.Specs {
		si := specInfo{State: sp.Name, Typename: sp.Typename, Expiration: "none"}
		switch sp.Mode {
		case 1:
			si.Expiration = "after-write"
		case 2:
			si.Expiration = "after-invoke"
		}
		if sp.TTL > 0 {
			si.ExpireAfter = (time.Duration(sp.TTL) * time.Millisecond).String()
		}
		out.Registered = append(out.Registered, si)
	}
	writeJSON(w, http.StatusOK, out)
}

// listIDs answers GET /state/<ns>/<type>?prefix=&after=&limit=: the ids of
// a type that hold durable state, in order, without loading values. next is
// the cursor of the following page (the last id of this one), null at the end.
func (s *Server) listIDs(w http.ResponseWriter, r *http.Request, t address.TypeName) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			fail(w, r, http.StatusBadRequest, "?limit= must be an integer from 1 to 10000")
			return
		}
		limit = n
	}
	if s.gather(w, r, idsListing(limit)) {
		return
	}
	own := s.localPart(w, r)
	ids := []string{}
	more := false
	err := s.st.ScanIDs(t, q.Get("prefix"), q.Get("after"), func(id string) bool {
		if own != nil && !own[s.partitionOf(address.Address{Type: t, ID: id})] {
			return true // another node's, or a stale copy of a partition that moved
		}
		if len(ids) == limit {
			more = true
			return false
		}
		ids = append(ids, id)
		return true
	})
	if err != nil {
		fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	out := struct {
		Namespace string   `json:"namespace"`
		Type      string   `json:"type"`
		IDs       []string `json:"ids"`
		Next      *string  `json:"next"`
	}{Namespace: t.Namespace, Type: t.Name, IDs: ids}
	if more {
		last := ids[len(ids)-1]
		out.Next = &last
	}
	writeJSON(w, http.StatusOK, out)
}

type typeInfo struct {
	Namespace   string `json:"namespace"`
	Type        string `json:"type"`
	Registered  bool   `json:"registered"`
	HoldsState  bool   `json:"holdsState"`
	StatesCount int    `json:"registeredStates"`
}

// listTypes answers GET /state and GET /state/<ns>: the function types that
// registered states or hold state — including types no longer in the
// module, so their state can still be found.
func (s *Server) listTypes(w http.ResponseWriter, r *http.Request, ns string) {
	if s.gather(w, r, typesListing()) {
		return
	}
	// The store's types, stale copies included: a type held only in a
	// partition that moved away may say holdsState here.
	s.localPart(w, r)
	byType := map[address.TypeName]*typeInfo{}
	get := func(t address.TypeName) *typeInfo {
		if byType[t] == nil {
			byType[t] = &typeInfo{Namespace: t.Namespace, Type: t.Name}
		}
		return byType[t]
	}
	for _, t := range s.eng.KnownTypes() {
		if ns == "" || t.Namespace == ns {
			ti := get(t)
			ti.Registered = true
			ti.StatesCount = len(s.eng.SpecsOf(t))
		}
	}
	err := s.st.ScanTypes(func(t address.TypeName) bool {
		if ns == "" || t.Namespace == ns {
			get(t).HoldsState = true
		}
		return true
	})
	if err != nil {
		fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	list := make([]typeInfo, 0, len(byType))
	for _, ti := range byType {
		list = append(list, *ti)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Namespace != list[j].Namespace {
			return list[i].Namespace < list[j].Namespace
		}
		return list[i].Type < list[j].Type
	})
	if ns != "" {
		writeJSON(w, http.StatusOK, struct {
			Namespace string     `json:"namespace"`
			Types     []typeInfo `json:"types"`
		}{ns, list})
		return
	}
	var namespaces []string
	seen := map[string]bool{}
	for _, ti := range list {
		if !seen[ti.Namespace] {
			seen[ti.Namespace] = true
			namespaces = append(namespaces, ti.Namespace)
		}
	}
	if namespaces == nil {
		namespaces = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Namespaces []string   `json:"namespaces"`
		Types      []typeInfo `json:"types"`
	}{namespaces, list})
}
