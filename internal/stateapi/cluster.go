package stateapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// ClusterView is what a node knows of the cluster it is part of (GET
// /cluster): itself, the member records it reads, and the consumer group's
// assignment. Options.ClusterView gives it in cluster mode.
type ClusterView struct {
	App        string
	Partitions int
	Self       ClusterNode
	Members    []ClusterMember
	GroupState string
	GroupErr   string
	Owners     map[int]string
}

// ClusterNode is what one node says of itself.
type ClusterNode struct {
	Node, AdminURL     string
	Ready              bool
	NotReady           string
	Member             string
	Generation         int32
	Serving, Restoring []int
	Lag                map[int]int64
	LastCommit         time.Time
	Commits, Aborts    int64
}

// ClusterMember is one member record a node reads.
type ClusterMember struct {
	Node, AdminURL string
	StartedAt      time.Time
	Distrusted     string
}

// clusterNodeJSON is one node in GET /cluster.
type clusterNodeJSON struct {
	Node       string           `json:"node"`
	AdminURL   string           `json:"adminURL"`
	Answered   bool             `json:"answered"`
	Ready      *bool            `json:"ready,omitempty"`
	NotReady   string           `json:"notReady,omitempty"`
	Member     string           `json:"member,omitempty"`
	Generation *int32           `json:"generation,omitempty"`
	Serving    []int            `json:"serving"`
	Restoring  []int            `json:"restoring"`
	Lag        map[string]int64 `json:"lag"`
	LastCommit *time.Time       `json:"lastCommit"`
	// LastCommitAgeSeconds is how long ago the last commit was, when the
	// answer was made.
	LastCommitAgeSeconds *float64   `json:"lastCommitAgeSeconds"`
	Commits              int64      `json:"commits"`
	Aborts               int64      `json:"aborts"`
	StartedAt            *time.Time `json:"startedAt,omitempty"`
	Distrusted           string     `json:"distrusted,omitempty"`
}

func (s *Server) nodeJSON(n ClusterNode) clusterNodeJSON {
	gen := n.Generation
	ready := n.Ready
	out := clusterNodeJSON{Node: n.Node, AdminURL: n.AdminURL, Answered: true, Ready: &ready, NotReady: n.NotReady,
		Member: n.Member, Generation: &gen, Serving: n.Serving, Restoring: n.Restoring, Lag: map[string]int64{},
		Commits: n.Commits, Aborts: n.Aborts}
	if out.Serving == nil {
		out.Serving = []int{}
	}
	if out.Restoring == nil {
		out.Restoring = []int{}
	}
	for p, l := range n.Lag {
		out.Lag[strconv.Itoa(p)] = l
	}
	if !n.LastCommit.IsZero() {
		t := n.LastCommit.UTC()
		age := s.opts.Now().Sub(n.LastCommit).Seconds()
		out.LastCommit, out.LastCommitAgeSeconds = &t, &age
	}
	return out
}

// serveCluster answers GET /cluster in cluster mode: every node with the
// partitions it serves and restores, its fetch lag, its last commit and
// its group generation, gathered from the nodes that own partitions; the
// member records this node reads, each node that did not answer listed
// with answered false; and the group's state and assignment. A request
// another node sent is answered with this node alone. In embedded mode it
// is a 404.
func (s *Server) serveCluster(w http.ResponseWriter, r *http.Request) {
	if !s.readWithoutParams(w, r, "/cluster") {
		return
	}
	if s.opts.ClusterView == nil {
		fail(w, r, http.StatusNotFound, "this runtime runs embedded, one process on its own store: there is no cluster to describe (docs/explanation/cluster.md)")
		return
	}
	if r.Method == http.MethodHead {
		// Nothing to read for headers alone (the console asks HEAD to
		// learn whether there is a cluster at all).
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	v := s.opts.ClusterView(ctx)
	nodes := map[string]clusterNodeJSON{v.Self.Node: s.nodeJSON(v.Self)}
	if !forward.Forwarded(r) && s.opts.Cluster != nil {
		answers, _ := s.opts.Cluster.Gather(r, 0, nil)
		for _, a := range answers {
			if a.Status != http.StatusOK {
				continue
			}
			var page struct {
				Nodes []clusterNodeJSON `json:"nodes"`
			}
			if json.Unmarshal(a.Body, &page) != nil {
				continue
			}
			for _, n := range page.Nodes {
				if n.Answered && n.Node != "" && n.Node != v.Self.Node {
					nodes[n.Node] = n
				}
			}
		}
	}
	for _, m := range v.Members {
		n, ok := nodes[m.Node]
		if !ok {
			n = clusterNodeJSON{Node: m.Node, AdminURL: m.AdminURL, Serving: []int{}, Restoring: []int{}, Lag: map[string]int64{}}
		}
		t := m.StartedAt.UTC()
		n.StartedAt, n.Distrusted = &t, m.Distrusted
		nodes[m.Node] = n
	}
	out := struct {
		App        string            `json:"app"`
		Partitions int               `json:"partitions"`
		GroupState string            `json:"groupState"`
		GroupError string            `json:"groupError,omitempty"`
		Nodes      []clusterNodeJSON `json:"nodes"`
		Owners     map[string]string `json:"owners"`
		Unowned    []int             `json:"unowned"`
	}{App: v.App, Partitions: v.Partitions, GroupState: v.GroupState, GroupError: v.GroupErr, Owners: map[string]string{}, Unowned: []int{}}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, n)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	for p := range v.Partitions {
		if node, ok := v.Owners[p]; ok {
			out.Owners[strconv.Itoa(p)] = node
		} else if v.GroupErr == "" {
			out.Unowned = append(out.Unowned, p)
		}
	}
	if forward.Forwarded(r) {
		// Another node gathers: this node's own part.
		self := nodes[v.Self.Node]
		out.Nodes = []clusterNodeJSON{self}
	}
	writeJSON(w, http.StatusOK, out)
}
