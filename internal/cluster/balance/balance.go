// Package balance is the consumer group balancer of a cluster-mode node
// (docs/explanation/cluster.md, "Assignment"): cooperative-sticky, run for each topic
// on its own.
//
// A node's group consumes the messages topic and the module's Kafka
// ingress topics. franz-go's cooperative-sticky balancer balances the
// number of topic-partitions each member gets over all topics together,
// so with an ingress topic the runtime partitions can split unevenly (12
// runtime partitions and a 3-partition ingress topic over three nodes:
// 3/5/4 runtime partitions, 5/5/5 in all). A runtime partition is the unit
// of work and of state; an ingress partition only routes records. So this
// balancer hands each topic to franz-go's own cooperative-sticky balancer
// separately: every topic's partitions are spread within one of the mean,
// and each keeps the sticky algorithm's promise of moving no partition
// that need not move.
package balance

import (
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CooperativeSticky returns the balancer of a node's consumer group: the
// cooperative-sticky protocol, each topic balanced on its own.
//
// It keeps the protocol name "cooperative-sticky" and that protocol's
// member metadata on purpose. The name tells the brokers and every member
// how members describe what they own and how they give partitions up
// (cooperatively, in a second join); both are unchanged. Only the plan,
// which the group leader alone makes, differs, and any plan of this
// balancer is a valid cooperative-sticky plan. So nodes built before it
// and nodes built with it share one group during a rolling upgrade: the
// group's leader decides, and the plan of either is valid to the other.
func CooperativeSticky() kgo.GroupBalancer {
	return perTopic{inner: kgo.CooperativeStickyBalancer()}
}

// perTopic runs inner once per topic. inner must be franz-go's
// cooperative-sticky balancer: perTopic reuses its protocol name,
// metadata and assignment parsing.
type perTopic struct {
	inner kgo.GroupBalancer
}

// ProtocolName is inner's: see CooperativeSticky.
func (b perTopic) ProtocolName() string { return b.inner.ProtocolName() }

// IsCooperative is true: partitions move in two rounds, the owner giving
// them up first.
func (b perTopic) IsCooperative() bool { return b.inner.IsCooperative() }

// JoinGroupMetadata is inner's: what this member consumes and owns.
func (b perTopic) JoinGroupMetadata(interests []string, owned map[string][]int32, generation int32) []byte {
	return b.inner.JoinGroupMetadata(interests, owned, generation)
}

// ParseSyncAssignment is inner's.
func (b perTopic) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return b.inner.ParseSyncAssignment(assignment)
}

// MemberBalancer parses the members' metadata (the consumer protocol's) for
// Balance.
func (b perTopic) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, fmt.Errorf("balance: %w", err)
	}
	return cb, cb.MemberTopics(), nil
}

// Balance balances each topic of topics (name → partition count) with
// inner, among the members interested in it, and merges the plans.
//
// A topic's members go to inner ordered by the partitions earlier topics
// gave them, fewest first (ties in the group's order: by instance id): the
// sticky balancer hands a partition nobody owns to the first of the
// members that have fewest of the topic, so the remainders of several
// topics tend to land on different members and the totals stay close. The
// order decides only such ties; a partition a member owns stays with it
// unless its topic's balance needs it elsewhere.
func (b perTopic) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan := cb.NewPlan()
	all := cb.Members()
	byID := make(map[string]*kmsg.JoinGroupResponseMember, len(all))
	for i := range all {
		byID[all[i].MemberID] = &all[i]
	}
	load := make(map[string]int, len(all))
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, topic := range names {
		members := oneTopic(cb, topic)
		sort.SliceStable(members, func(i, j int) bool { return load[members[i].MemberID] < load[members[j].MemberID] })
		mb, _, err := b.inner.MemberBalancer(members)
		if err != nil {
			cb.SetError(fmt.Errorf("balance: topic %s: %w", topic, err))
			return nil
		}
		into, err := balanceOrError(mb, map[string]int32{topic: topics[topic]})
		if err != nil {
			cb.SetError(fmt.Errorf("balance: topic %s: %w", topic, err))
			return nil
		}
		bp, ok := into.(*kgo.BalancePlan)
		if !ok {
			cb.SetError(fmt.Errorf("balance: topic %s: the inner balancer's plan is a %T, not a *kgo.BalancePlan", topic, into))
			return nil
		}
		for id, assigned := range bp.AsMemberIDMap() {
			m := byID[id]
			if m == nil {
				cb.SetError(fmt.Errorf("balance: topic %s: the inner balancer assigned to member %s, which is not in the group", topic, id))
				return nil
			}
			for t, ps := range assigned {
				plan.AddPartitions(m, t, ps)
				load[id] += len(ps)
			}
		}
	}
	return plan
}

// balanceOrError runs a member balancer, with its error when it can fail.
func balanceOrError(mb kgo.GroupMemberBalancer, topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	if e, ok := mb.(kgo.GroupMemberBalancerOrError); ok {
		return e.BalanceOrError(topics)
	}
	return mb.Balance(topics), nil
}

// oneTopic returns the group's members as they would have joined had they
// consumed topic alone (or nothing, when not interested in it): their
// interests and owned partitions narrowed to topic, everything else (the
// generation, the rack, the sticky user data, whose other topics inner
// ignores) kept.
func oneTopic(cb *kgo.ConsumerBalancer, topic string) []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, 0, len(cb.Members()))
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		narrow := *meta
		narrow.Topics = nil
		if slices.Contains(meta.Topics, topic) {
			narrow.Topics = []string{topic}
		}
		narrow.OwnedPartitions = nil
		for _, o := range meta.OwnedPartitions {
			if o.Topic == topic {
				narrow.OwnedPartitions = append(narrow.OwnedPartitions, o)
			}
		}
		mm := *m
		mm.ProtocolMetadata = narrow.AppendTo(nil)
		out = append(out, mm)
	})
	return out
}
