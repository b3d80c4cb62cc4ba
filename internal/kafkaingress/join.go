package kafkaingress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The consumer's group membership, seen from the operator's side: what it
// waits for while it joins, and leaving the group on a clean stop
// (docs/reference/kafka-ingress.md, "Joining and leaving the group").
//
// A join can wait a long time in silence. The group's coordinator
// completes a rebalance only once every member it knows has rejoined or
// been dropped, and a static member whose process stopped without leaving
// — another application that last used the consumerGroupId, or a runtime
// that kept its membership — is dropped only when its session times out
// (45 s by default). joinLoop says so while it lasts.

// markJoined notes, once, that the consumer joined its group: called when
// the group first assigns it partitions, and by joinLoop when the client
// holds a generation without any (a group with more members than
// partitions). Not from an OnPartitionsAssigned callback: with
// BlockRebalanceOnPoll the client would hold the rebalance until the
// next poll returns.
func (c *Consumer) markJoined() {
	c.joinOnce.Do(func() {
		member, gen := c.cl.GroupMetadata()
		c.log.Info("kafka ingress: joined its consumer group", "group", c.cfg.GroupID, "instance_id", c.instance,
			"member_id", member, "generation", gen)
		close(c.joined)
	})
}

// joinLoop logs that the consumer joins its group, then, every
// JoinReportInterval until it has joined, what the group waits for.
func (c *Consumer) joinLoop() {
	c.log.Info("kafka ingress: joining its consumer group", "group", c.cfg.GroupID, "instance_id", c.instance,
		"session_timeout", c.sessionTimeout(), "topics", c.mp.Topics())
	if c.cfg.JoinReportInterval < 0 {
		return
	}
	start := c.cfg.Now()
	t := time.NewTicker(c.cfg.JoinReportInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.joined:
			return
		case <-t.C:
		}
		if _, gen := c.cl.GroupMetadata(); gen >= 0 {
			c.markJoined() // joined, and assigned nothing
			return
		}
		c.reportJoinWait(c.cfg.Now().Sub(start))
	}
}

// sessionTimeout is the consumer's own session.timeout.ms.
func (c *Consumer) sessionTimeout() time.Duration {
	d, _ := c.cl.OptValue(kgo.SessionTimeout).(time.Duration)
	return d
}

// reportJoinWait describes the group and logs, at WARN, what the join waits
// for: the other members the coordinator knows, and the partitions each
// holds.
func (c *Consumer) reportJoinWait(waited time.Duration) {
	attrs := []any{"group", c.cfg.GroupID, "instance_id", c.instance, "waited", waited.Round(time.Second)}
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	gs, err := c.adm.DescribeGroups(ctx, c.cfg.GroupID)
	g, ok := gs[c.cfg.GroupID]
	if err == nil && ok {
		err = g.Err
	}
	if err != nil {
		c.log.Warn("kafka ingress: still joining its consumer group, which could not be described; the brokers may be unreachable",
			append(attrs, "error", err)...)
		return
	}
	var others []string
	for _, m := range g.Members {
		if m.InstanceID != nil && *m.InstanceID == c.instance {
			continue // this consumer, known to the coordinator already
		}
		others = append(others, describeMember(m))
	}
	slices.Sort(others)
	attrs = append(attrs, "group_state", g.State)
	if len(others) == 0 {
		c.log.Warn("kafka ingress: still joining its consumer group; no other member holds it, so the coordinator has not answered the join yet",
			attrs...)
		return
	}
	c.log.Warn("kafka ingress: still joining its consumer group: the coordinator waits for these members to rejoin or to time out; "+
		"a member of a process that stopped without leaving the group (another application that used this consumerGroupId, "+
		"or a runtime that kept its membership) holds its partitions until its session timeout passes (session.timeout.ms; "+
		"own_session_timeout is this consumer's)",
		append(attrs, "members", others, "own_session_timeout", c.sessionTimeout())...)
}

// describeMember names a group member and what it consumes, for a log
// line: "instance statefun-shop/in (member m-1, client c on /10.0.0.5)
// holding logins[0 1]". While the group rebalances, which is when a join
// waits, the coordinator tells neither what a member was assigned nor
// what it subscribed to: the line then names the member alone, and a
// member that has not rejoined still holds what it had.
func describeMember(m kadm.DescribedGroupMember) string {
	var b strings.Builder
	if m.InstanceID != nil {
		fmt.Fprintf(&b, "instance %s (member %s", *m.InstanceID, m.MemberID)
	} else {
		fmt.Fprintf(&b, "dynamic member %s (", m.MemberID)
	}
	fmt.Fprintf(&b, ", client %s on %s)", m.ClientID, m.ClientHost)
	held := map[string][]int32{}
	if as, ok := m.Assigned.AsConsumer(); ok {
		for _, t := range as.Topics {
			held[t.Topic] = append(held[t.Topic], t.Partitions...)
		}
	}
	if len(held) > 0 {
		b.WriteString(" holding " + partitionList(held))
		return b.String()
	}
	if j, ok := m.Join.AsConsumer(); ok && len(j.Topics) > 0 {
		b.WriteString(" subscribed to " + strings.Join(slices.Sorted(slices.Values(j.Topics)), " "))
	}
	return b.String()
}

// partitionList is "topic[0 1 2] other[3]", topics sorted.
func partitionList(m map[string][]int32) string {
	var parts []string
	for _, topic := range slices.Sorted(maps.Keys(m)) {
		ps := slices.Clone(m[topic])
		slices.Sort(ps)
		parts = append(parts, fmt.Sprintf("%s%v", topic, ps))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// OnGroupManageError logs an error that made the client leave or fail to
// join the group (it retries with backoff); an
// INCONSISTENT_GROUP_PROTOCOL, for one, says another application's members
// with another assignor still hold the group. At most one line per 10 s.
func (h hooks) OnGroupManageError(err error) {
	c := h.c
	if errors.Is(err, context.Canceled) || c.ctx.Err() != nil {
		return
	}
	if n, ok := c.groupErrs.allow("group"); ok {
		c.log.Warn("kafka ingress: the consumer group refused this member or could not be reached; retrying",
			"group", c.cfg.GroupID, "instance_id", c.instance, "error", err, "suppressed", n)
	}
}

// leave removes this member from its group by instance id, so that the
// next consumer to join is assigned the partitions at once instead of
// after this member's session timeout. Group management stops first: the
// revocation stops the workers and commits the durable positions, as Close
// would, and no heartbeat or rejoin of this client follows the leave. A
// failure is logged; the partitions then move after the session timeout.
func (c *Consumer) leave() {
	if _, gen := c.cl.GroupMetadata(); gen < 0 {
		return // never joined: nothing to leave, and no broker to wait for
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.cl.LeaveGroupContext(ctx); err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		c.log.Warn("kafka ingress: stopping group management failed", "group", c.cfg.GroupID, "error", err)
	}
	if c.instance == "" {
		return // a dynamic member: LeaveGroupContext sent its leave
	}
	resps, err := c.adm.LeaveGroup(ctx, kadm.LeaveGroup(c.cfg.GroupID).InstanceIDs(c.instance).
		Reason("statefun: kafka ingress "+c.cfg.ID+" stopped"))
	if err == nil {
		err = resps.Error()
	}
	switch {
	case errors.Is(err, kerr.UnknownMemberID):
		// Not a member (never joined, or the client left already).
	case err != nil:
		c.log.Warn("kafka ingress: leaving its consumer group failed; the next consumer to join waits for this member's session timeout",
			"group", c.cfg.GroupID, "instance_id", c.instance, "session_timeout", c.sessionTimeout(), "error", err)
	default:
		c.log.Info("kafka ingress: left its consumer group", "group", c.cfg.GroupID, "instance_id", c.instance)
	}
}
