package node

import (
	"context"
	"sort"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/members"
	"github.com/statefun-go/statefun/internal/cluster/session"
)

// View is what this node knows of the cluster (GET /cluster): itself, the
// member records it reads, and the consumer group as the coordinator
// describes it.
type View struct {
	App        string
	Partitions int
	Self       Self
	Members    []Member
	// GroupState is the consumer group's state ("Stable",
	// "PreparingRebalance", …); empty when the group could not be read,
	// and GroupErr says why.
	GroupState string
	GroupErr   string
	// Owners names the node that owns each partition, by the group's
	// assignment.
	Owners map[int]string
}

// Self is what the node says of itself.
type Self struct {
	Node, AdminURL string
	Ready          bool
	NotReady       string // why not, when not
	session.Status
}

// Member is one member record this node reads.
type Member struct {
	Node, AdminURL string
	StartedAt      time.Time
	// Distrusted says why this node does not trust the record ("" when it
	// has nothing against it).
	Distrusted string
}

// Self returns what the node says of itself.
func (n *Node) Self() Self {
	s := Self{Node: n.cfg.Cluster.NodeID, AdminURL: n.cfg.Cluster.Advertise, Status: n.sess.Status()}
	if err := n.Ready(); err != nil {
		s.NotReady = err.Error()
	} else {
		s.Ready = true
	}
	return s
}

// View returns what the node knows of the cluster.
func (n *Node) View(ctx context.Context) View {
	v := View{App: n.cfg.Cluster.AppID, Partitions: n.p, Self: n.Self(), Owners: map[int]string{}}
	if w := n.watcher.Load(); w != nil {
		for id, m := range w.All() {
			v.Members = append(v.Members, Member{Node: id, AdminURL: m.AdminURL, StartedAt: m.StartedAt, Distrusted: w.Distrusted(id)})
		}
		sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].Node < v.Members[j].Node })
	}
	o, err := members.Owners(ctx, n.adm, n.cfg.Cluster)
	if err != nil {
		v.GroupErr = err.Error()
		return v
	}
	v.GroupState = o.State
	for p, node := range o.Owners {
		v.Owners[int(p)] = node
	}
	return v
}
