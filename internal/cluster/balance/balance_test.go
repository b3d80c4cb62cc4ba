package balance

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	group    = "app"
	messages = "app-messages"
)

// topicSizes are the topics every member of the tests consumes: the
// messages topic with 12 runtime partitions and two ingress topics.
var topicSizes = map[string]int32{messages: 12, "orders": 3, "clicks": 5}

// tp is one topic-partition.
type tp struct {
	topic string
	p     int32
}

func (x tp) String() string { return fmt.Sprintf("%s/%d", x.topic, x.p) }

// groupOf is a consumer group of real franz-go clients on kfake, each a
// static member (instance id = its name) balancing with the balancer
// under test, as a node's session joins.
type groupOf struct {
	t       *testing.T
	kc      *kfake.Cluster
	adm     *kadm.Client
	members map[string]*kgo.Client
	bal     func() kgo.GroupBalancer
}

func newGroup(t *testing.T, bal func() kgo.GroupBalancer) *groupOf {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	g := &groupOf{t: t, kc: kc, adm: kadm.NewClient(cl), members: map[string]*kgo.Client{}, bal: bal}
	for topic, n := range topicSizes {
		if resp, err := g.adm.CreateTopic(ctxT(t), n, 3, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, resp.Err)
		}
	}
	return g
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// join starts member id.
func (g *groupOf) join(id string) {
	g.t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(g.kc.ListenAddrs()...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(slices.Sorted(maps.Keys(topicSizes))...),
		kgo.InstanceID(id),
		kgo.Balancers(g.bal()),
		kgo.SessionTimeout(3*time.Second),
		kgo.HeartbeatInterval(50*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		g.t.Fatal(err)
	}
	g.members[id] = cl
	g.t.Cleanup(cl.Close)
}

// leave stops member id and removes it from the group by its instance id,
// as a node stopped for good does (a static member's Close does not leave).
func (g *groupOf) leave(id string) {
	g.t.Helper()
	g.members[id].Close()
	delete(g.members, id)
	resps, err := g.adm.LeaveGroup(ctxT(g.t), kadm.LeaveGroup(group).InstanceIDs(id))
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		g.t.Fatalf("member %s leaving: %v", id, err)
	}
}

// settled waits until the group is stable, its members are exactly the
// running ones, and every partition of every topic is assigned to exactly
// one of them, and returns the owner (instance id) of each partition.
func (g *groupOf) settled() map[tp]string {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		owners, why := g.describe()
		if why == "" {
			return owners
		}
		last = why
		if time.Now().After(deadline) {
			g.t.Fatalf("the group did not settle within 30s: %s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describe returns the group's assignment, or why it is not settled.
func (g *groupOf) describe() (map[tp]string, string) {
	gs, err := g.adm.DescribeGroups(ctxT(g.t), group)
	if err != nil {
		return nil, err.Error()
	}
	d := gs[group]
	if d.Err != nil {
		return nil, d.Err.Error()
	}
	if d.State != "Stable" {
		return nil, "state " + d.State
	}
	if len(d.Members) != len(g.members) {
		return nil, fmt.Sprintf("%d members, want %d", len(d.Members), len(g.members))
	}
	owners := map[tp]string{}
	for _, m := range d.Members {
		if m.InstanceID == nil || g.members[*m.InstanceID] == nil {
			return nil, fmt.Sprintf("member %s is not a running one", m.MemberID)
		}
		as, ok := m.Assigned.AsConsumer()
		if !ok {
			return nil, "member " + *m.InstanceID + " has no assignment yet"
		}
		for _, t := range as.Topics {
			for _, p := range t.Partitions {
				k := tp{t.Topic, p}
				if o, dup := owners[k]; dup {
					return nil, fmt.Sprintf("%v assigned to %s and %s", k, o, *m.InstanceID)
				}
				owners[k] = *m.InstanceID
			}
		}
	}
	for topic, n := range topicSizes {
		for p := range n {
			if _, ok := owners[tp{topic, p}]; !ok {
				return nil, fmt.Sprintf("%s/%d unassigned (a cooperative move in progress)", topic, p)
			}
		}
	}
	return owners, ""
}

// counts returns, per topic, how many partitions each running member owns.
func (g *groupOf) counts(owners map[tp]string) map[string]map[string]int {
	c := map[string]map[string]int{}
	for topic := range topicSizes {
		c[topic] = map[string]int{}
		for id := range g.members {
			c[topic][id] = 0
		}
	}
	for k, id := range owners {
		c[k.topic][id]++
	}
	return c
}

// checkBalanced fails unless every topic's partitions are spread over the
// members within one of the mean, and the totals too.
func (g *groupOf) checkBalanced(when string, owners map[tp]string) {
	g.t.Helper()
	c := g.counts(owners)
	totals := map[string]int{}
	for topic, per := range c {
		for id, n := range per {
			totals[id] += n
		}
		if lo, hi := minMax(per); hi-lo > 1 {
			g.t.Errorf("%s: %s split %s, want each member within one of the mean", when, topic, split(per))
		}
	}
	if lo, hi := minMax(totals); hi-lo > 1 {
		g.t.Errorf("%s: totals %s, want each member within one of the mean", when, split(totals))
	}
	g.t.Logf("%s: %s %s, totals %s", when, messages, split(c[messages]), split(totals))
}

func minMax(m map[string]int) (lo, hi int) {
	first := true
	for _, n := range m {
		if first || n < lo {
			lo = n
		}
		if first || n > hi {
			hi = n
		}
		first = false
	}
	return lo, hi
}

func split(m map[string]int) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", id, m[id]))
	}
	return strings.Join(parts, " ")
}

// moves lists the partitions whose owner changed from before to after,
// leaving out those whose owner is gone (they had to move).
func moves(before, after map[tp]string, gone string) []string {
	var out []string
	for k, was := range before {
		if now := after[k]; now != was && was != gone {
			out = append(out, fmt.Sprintf("%v %s→%s", k, was, now))
		}
	}
	slices.Sort(out)
	return out
}

// TestRuntimePartitionsSplitEvenlyBesideIngressTopics joins three static
// members consuming the messages topic (12 partitions) and two ingress
// topics (3 and 5 partitions), as nodes do, and checks that every topic,
// the messages topic above all, is split within one of the mean (4/4/4),
// and that the assignment is sticky: when a member leaves, only its
// partitions move; when one joins, only the partitions it takes move.
func TestRuntimePartitionsSplitEvenlyBesideIngressTopics(t *testing.T) {
	g := newGroup(t, CooperativeSticky)
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		g.join(id)
	}
	three := g.settled()
	g.checkBalanced("three members", three)
	for id, n := range g.counts(three)[messages] {
		if n != 4 {
			t.Errorf("three members: %s owns %d runtime partitions, want 4", id, n)
		}
	}

	g.leave("node-c")
	two := g.settled()
	g.checkBalanced("node-c left", two)
	if mv := moves(three, two, "node-c"); len(mv) > 0 {
		t.Errorf("node-c left: partitions of the members that stayed moved needlessly: %v", mv)
	}

	g.join("node-d")
	withD := g.settled()
	g.checkBalanced("node-d joined", withD)
	var taken int
	for _, id := range withD {
		if id == "node-d" {
			taken++
		}
	}
	mv := moves(two, withD, "")
	if len(mv) != taken {
		t.Errorf("node-d joined: %d partitions moved, want only the %d it took: %v", len(mv), taken, mv)
	}
	for _, m := range mv {
		if !strings.HasSuffix(m, "→node-d") {
			t.Errorf("node-d joined: a partition moved between the members that stayed: %s", m)
		}
	}
	for id, n := range g.counts(withD)[messages] {
		if n != 4 {
			t.Errorf("node-d joined: %s owns %d runtime partitions, want 4", id, n)
		}
	}
}

// TestSharesAGroupWithTheTotalCountBalancer checks the rolling-upgrade
// promise of CooperativeSticky: a member balancing with franz-go's own
// cooperative-sticky balancer (a node built before this package) joins
// the same group, and the group settles with every partition assigned
// once, whichever member leads.
func TestSharesAGroupWithTheTotalCountBalancer(t *testing.T) {
	var n int
	g := newGroup(t, func() kgo.GroupBalancer {
		n++
		if n == 2 {
			return kgo.CooperativeStickyBalancer()
		}
		return CooperativeSticky()
	})
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		g.join(id)
	}
	g.settled()
	g.leave("node-a") // the first to join, likely the leader
	g.settled()
}

// member is a group member as JoinGroup hands it to the leader: the
// cooperative-sticky metadata of what it consumes and owns.
func member(t *testing.T, id string, gen int32, topics []string, owned map[string][]int32) kmsg.JoinGroupResponseMember {
	t.Helper()
	m := kmsg.NewJoinGroupResponseMember()
	m.MemberID, m.InstanceID = id, kmsg.StringPtr(id)
	m.ProtocolMetadata = CooperativeSticky().JoinGroupMetadata(topics, owned, gen)
	return m
}

// TestBalanceNarrowsEachTopic balances a plan without Kafka: a member not
// interested in a topic gets none of it, a member that owns more than its
// share of a topic keeps the rest of it, and a partition still owned by
// the member it moves from is held back for the cooperative second round.
func TestBalanceNarrowsEachTopic(t *testing.T) {
	members := []kmsg.JoinGroupResponseMember{
		member(t, "a", 5, []string{messages}, map[string][]int32{messages: {0, 1, 2, 3, 4, 5, 6, 7}}),
		member(t, "b", 5, []string{messages, "orders"}, map[string][]int32{messages: {8, 9, 10, 11}, "orders": {0, 1, 2}}),
		member(t, "c", -1, []string{messages, "orders"}, nil),
	}
	mb, topics, err := CooperativeSticky().MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := topics["orders"]; !ok || len(topics) != 2 {
		t.Fatalf("member topics %v; want %s and orders", topics, messages)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{messages: 12, "orders": 3})
	if err != nil {
		t.Fatal(err)
	}
	plan := into.(*kgo.BalancePlan).AsMemberIDMap()
	if got := plan["a"]["orders"]; len(got) != 0 {
		t.Errorf("a, not interested in orders, was given %v", got)
	}
	// a keeps 4 of its 8 (the other 4 go to c in the second round), b its
	// 4; c gets nothing of messages yet: every partition it will take is
	// still owned by a.
	if a := plan["a"][messages]; len(a) != 4 || !subset(a, []int32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("a's messages partitions %v; want 4 of those it owned", a)
	}
	if b := plan["b"][messages]; !slices.Equal(sorted(b), []int32{8, 9, 10, 11}) {
		t.Errorf("b's messages partitions %v; want the 4 it owned", b)
	}
	if c := plan["c"][messages]; len(c) != 0 {
		t.Errorf("c was given %v of messages in the first round; want none until a gives them up", c)
	}
	if b, c := plan["b"]["orders"], plan["c"]["orders"]; len(b) != 2 || len(c) != 0 {
		t.Errorf("orders: b %v, c %v; want b to keep 2 and give 1 up for c's second round", b, c)
	}
}

func subset(xs, of []int32) bool {
	for _, x := range xs {
		if !slices.Contains(of, x) {
			return false
		}
	}
	return true
}

func sorted(xs []int32) []int32 {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
