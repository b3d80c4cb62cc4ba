package kafkaingress

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// logLines is a log the tests read back: every line a text handler wrote.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// line returns the first line holding every one of parts, or "".
func (l *logLines) line(parts ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, line := range strings.Split(l.buf.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		return line
	}
	return ""
}

// newGroupCluster is a cluster whose groups take short session timeouts,
// so that a member that stopped without leaving times out within a test.
func newGroupCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, "in"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// appConfig is the ingress id of one application consuming topic "in" in
// the group "shared", with the given session timeout.
func appConfig(kc *kfake.Cluster, id string, session time.Duration, log *logLines) Config {
	cfg := baseConfig(kc, "shared", route("in", counterA))
	cfg.ID = id
	cfg.Logger = log.logger()
	cfg.ClientOpts = []kgo.Opt{kgo.SessionTimeout(session), kgo.HeartbeatInterval(100 * time.Millisecond)}
	return cfg
}

// joinedWithin waits up to d for the consumer to join its group and
// reports whether it did.
func joinedWithin(c *Consumer, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.joined:
		return true
	case <-t.C:
		return false
	}
}

// members returns the instance ids the group's coordinator knows.
func members(t *testing.T, kc *kfake.Cluster, group string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range gs[group].Members {
		if m.InstanceID != nil {
			ids = append(ids, *m.InstanceID)
		}
	}
	return ids
}

// A clean stop leaves the group: the member is gone at once, and another
// application given the same consumerGroupId (another ingress id, so
// another instance id) is assigned the partitions without waiting for the
// first one's session timeout (30 s here).
func TestCloseLeavesTheGroup(t *testing.T) {
	kc := newGroupCluster(t)
	var logA, logB logLines
	a := startRig(t, vfs.NewMem(), appConfig(kc, "shop/in", 30*time.Second, &logA), nil, nil)
	if !joinedWithin(a.c, 20*time.Second) {
		t.Fatalf("shop/in did not join its group:\n%s", logA.buf.String())
	}
	a.stop()
	if ids := members(t, kc, "shared"); len(ids) != 0 {
		t.Errorf("after shop/in stopped the group still has members %v, want none", ids)
	}
	if logA.line("left its consumer group", "instance_id=statefun-shop/in") == "" {
		t.Errorf("no line says shop/in left its group:\n%s", logA.buf.String())
	}

	b := startRig(t, vfs.NewMem(), appConfig(kc, "billing/in", 30*time.Second, &logB), nil, nil)
	start := time.Now()
	if !joinedWithin(b.c, 10*time.Second) {
		t.Fatalf("billing/in did not join within 10 s, so it waited for shop/in's session timeout:\n%s", logB.buf.String())
	}
	t.Logf("billing/in joined %v after it started", time.Since(start).Round(time.Millisecond))
}

// A runtime that keeps its membership on stop stays in the group; the next
// application to join with the same consumerGroupId waits for that
// member's session timeout, and says so while it waits: the group, its
// state, the member it waits for and the session timeout.
func TestJoinWaitIsReported(t *testing.T) {
	kc := newGroupCluster(t)
	var logA, logB logLines
	cfgA := appConfig(kc, "shop/in", 3*time.Second, &logA)
	cfgA.KeepMembership = true
	a := startRig(t, vfs.NewMem(), cfgA, nil, nil)
	if !joinedWithin(a.c, 20*time.Second) {
		t.Fatalf("shop/in did not join its group:\n%s", logA.buf.String())
	}
	waitFor(t, "shop/in holding every partition of in", func() bool {
		return logA.line("kafka partition assigned", "partition=3") != "" && logA.line("partition=0") != ""
	})
	a.stop()
	if ids := members(t, kc, "shared"); len(ids) != 1 || ids[0] != "statefun-shop/in" {
		t.Fatalf("after shop/in stopped keeping its membership the group has members %v, want [statefun-shop/in]", ids)
	}

	cfgB := appConfig(kc, "billing/in", 3*time.Second, &logB)
	cfgB.JoinReportInterval = 200 * time.Millisecond
	b := startRig(t, vfs.NewMem(), cfgB, nil, nil)
	waitFor(t, "an INFO line saying billing/in joins its group, with its session timeout", func() bool {
		return logB.line("level=INFO", "joining its consumer group", "group=shared", "instance_id=statefun-billing/in", "session_timeout=3s") != ""
	})
	waitFor(t, "a WARN line naming the member billing/in waits for", func() bool {
		return logB.line("level=WARN", "still joining its consumer group", "group=shared", "group_state=PreparingRebalance", "members=\"[instance statefun-shop/in (member statefun-shop/in-", "own_session_timeout=3s") != ""
	})
	if !joinedWithin(b.c, 20*time.Second) {
		t.Fatalf("billing/in did not join after shop/in's session timed out:\n%s", logB.buf.String())
	}
	if logB.line("level=INFO", "joined its consumer group", "group=shared") == "" {
		t.Errorf("no INFO line says billing/in joined:\n%s", logB.buf.String())
	}
	t.Logf("billing/in's wait:\n%s", logB.line("still joining"))
}
