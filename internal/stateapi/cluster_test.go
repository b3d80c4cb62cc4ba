package stateapi

import (
	"context"
	"testing"
	"time"
)

// GET /cluster, asked of a node with no other node answering: the node
// itself, with its partitions, lag and last commit; a member record whose
// node did not answer is listed with answered false; the group's owners
// and the partitions nobody owns.
func TestClusterListsTheNodes(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	now := time.Now()
	api := serve(t, eng, Options{Now: func() time.Time { return now }, ClusterView: func(context.Context) ClusterView {
		return ClusterView{App: "shop", Partitions: 3, GroupState: "Stable", Owners: map[int]string{0: "a", 1: "b"},
			Self: ClusterNode{Node: "a", AdminURL: "http://a:8070", Ready: true, Member: "a-7", Generation: 4,
				Serving: []int{0}, Restoring: []int{}, Lag: map[int]int64{0: 12}, LastCommit: now.Add(-2 * time.Second), Commits: 9, Aborts: 1},
			Members: []ClusterMember{{Node: "a", AdminURL: "http://a:8070", StartedAt: now}, {Node: "b", AdminURL: "http://b:8070", StartedAt: now, Distrusted: "its record is not signed"}}}
	}})
	var got struct {
		App        string
		Partitions int
		GroupState string
		Owners     map[string]string
		Unowned    []int
		Nodes      []struct {
			Node, AdminURL, Member, Distrusted string
			Answered                           bool
			Generation                         int32
			Serving                            []int
			Lag                                map[string]int64
			LastCommitAgeSeconds               *float64
			Commits, Aborts                    int64
		}
	}
	send(t, api, "GET", "/cluster", nil).json(t, &got)
	if got.App != "shop" || got.Partitions != 3 || got.GroupState != "Stable" || got.Owners["1"] != "b" || len(got.Unowned) != 1 || got.Unowned[0] != 2 {
		t.Errorf("the cluster: %+v", got)
	}
	if len(got.Nodes) != 2 {
		t.Fatalf("nodes %+v, want a and b", got.Nodes)
	}
	a, b := got.Nodes[0], got.Nodes[1]
	if a.Node != "a" || !a.Answered || a.Member != "a-7" || a.Generation != 4 || len(a.Serving) != 1 || a.Lag["0"] != 12 ||
		a.LastCommitAgeSeconds == nil || *a.LastCommitAgeSeconds != 2 || a.Commits != 9 || a.Aborts != 1 {
		t.Errorf("node a: %+v", a)
	}
	if b.Node != "b" || b.Answered || b.AdminURL != "http://b:8070" || b.Distrusted == "" {
		t.Errorf("node b, which did not answer: %+v", b)
	}
}
