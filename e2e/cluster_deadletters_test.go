package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

// messagesOwner names the node the consumer group assigned partition p of
// <app>-messages to ("" when none is).
func messagesOwner(t *testing.T, n *clusterNode, p int32) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(n.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, n.app)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for _, m := range g.Members {
			assigned, _ := m.Assigned.AsConsumer()
			if assigned == nil || m.InstanceID == nil {
				continue
			}
			for _, tp := range assigned.Topics {
				if tp.Topic != n.app+"-messages" {
					continue
				}
				for _, q := range tp.Partitions {
					if q == p {
						return *m.InstanceID
					}
				}
			}
		}
	}
	return ""
}

// cliDeadLetters runs `statefun state dead-letters <ingress> -o json`
// against node n's admin listener.
func cliDeadLetters(t *testing.T, n *clusterNode, ingress string) ([]stateclient.DeadLetter, error) {
	t.Helper()
	cmd := exec.Command(binary, "state", "dead-letters", "-o", "json", ingress)
	cmd.Env = append(os.Environ(), "STATEFUN_SERVER=http://"+n.admin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("statefun state dead-letters: %v: %s", err, stderr.String())
	}
	var list []stateclient.DeadLetter
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("statefun state dead-letters -o json: %v: %s", err, out)
	}
	return list, nil
}

// TestClusterKafkaIngressDeadLetters runs two nodes whose module has a
// Kafka ingress; kcat writes records that cannot become messages (no key,
// an empty key, a key not UTF-8) into partitions 1 and 3 of its topic.
// Each becomes a dead letter kept by runtime partition <Kafka partition>
// mod 8 — stored by that partition's owner through its changelog — and
// `statefun state dead-letters` asked of the node that does not own
// partition 1 lists every one, once, with its topic, partition, offset,
// reason, key and value (the listing is gathered from both nodes). The
// owner of partition 1 is then killed with SIGKILL: the survivor takes its
// partitions over, restoring them from their changelogs, and lists the
// same dead letters, stored at the same time (the same records, not new
// ones). The good record after them is delivered.
func TestClusterKafkaIngressDeadLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3", "-topic", "in:4")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newIngressClusterNodes(t, dk, "kdl", fn, "node-a", "node-b")
	launchAll(t, nodes...)

	// kcat -K: gives a line without ':' a null key.
	produce := func(partition string, lines ...string) {
		t.Helper()
		cmd := exec.Command(kcat, "-P", "-b", dk.brokers, "-t", "in", "-p", partition, "-K:")
		cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
	}
	produce("1", "a record without a key", ":an empty key", "k1:good")
	produce("3", "\xff\xfe:a key that is not UTF-8")
	type want struct {
		partition int32
		offset    int64
		reason    string
		key       []byte // nil: no key
		value     string
	}
	wants := []want{
		{1, 0, "null-key", nil, "a record without a key"},
		{1, 1, "empty-key", []byte{}, "an empty key"},
		{3, 0, "invalid-utf8-key", []byte{0xff, 0xfe}, "a key that is not UTF-8"},
	}

	owner := messagesOwner(t, nodes[0], 1)
	var victim, other *clusterNode
	for _, n := range nodes {
		if n.id == owner {
			victim = n
		} else {
			other = n
		}
	}
	if victim == nil || other == nil {
		t.Fatalf("partition 1 of kdl-messages is owned by %q, not by one of the two nodes\n%s", owner, describeGroup(nodes...))
	}
	t.Logf("%s owns runtime partition 1 (which keeps Kafka partition 1's dead letters); asking %s", victim.id, other.id)

	check := func(where string, list []stateclient.DeadLetter) {
		t.Helper()
		if len(list) != len(wants) {
			t.Fatalf("%s: %d dead letters, want %d: %+v", where, len(list), len(wants), list)
		}
		seen := map[string]stateclient.DeadLetter{}
		for _, d := range list {
			seen[fmt.Sprintf("%d@%d", d.Partition, d.Offset)] = d
		}
		for _, w := range wants {
			d, ok := seen[fmt.Sprintf("%d@%d", w.partition, w.offset)]
			switch {
			case !ok:
				t.Errorf("%s: no dead letter of in/%d@%d", where, w.partition, w.offset)
			case d.Ingress != "kc/in" || d.Topic != "in" || d.Reason != w.reason || string(d.Value.Bytes) != w.value || d.ValueOmitted:
				t.Errorf("%s: dead letter of in/%d@%d = %+v, want ingress kc/in, reason %s, value %q", where, w.partition, w.offset, d, w.reason, w.value)
			case (w.key == nil) != (d.Key == nil) || d.Key != nil && !bytes.Equal(d.Key.Bytes, w.key):
				t.Errorf("%s: dead letter of in/%d@%d has key %+v, want %q (nil: none)", where, w.partition, w.offset, d.Key, w.key)
			}
		}
	}
	var before []stateclient.DeadLetter
	waitFor(t, 60*time.Second, "statefun state dead-letters on "+other.id+" lists the 3 bad records", func() bool {
		list, err := cliDeadLetters(t, other, "kc/in")
		if err != nil {
			t.Log(err)
			return false
		}
		before = list
		return len(list) >= len(wants)
	})
	check("on "+other.id+", before the kill", before)
	resp, body, err := other.apiGet("/ingresses")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ingresses on %s: %v %v %s", other.id, resp, err, body)
	}
	var sum struct {
		Ingresses []struct {
			Ingress     string `json:"ingress"`
			DeadLetters int    `json:"deadLetters"`
		} `json:"ingresses"`
	}
	if err := json.Unmarshal(body, &sum); err != nil || len(sum.Ingresses) != 1 || sum.Ingresses[0].Ingress != "kc/in" || sum.Ingresses[0].DeadLetters != 3 {
		t.Errorf("GET /ingresses on %s: %s; want kc/in with 3 dead letters", other.id, body)
	}
	waitCounts(t, nodes, map[string]int{"k1": 1}, 60*time.Second)

	victim.kill()
	t.Logf("killed %s", victim.id)
	waitServing(t, 90*time.Second, other)
	var after []stateclient.DeadLetter
	waitFor(t, 30*time.Second, "statefun state dead-letters on "+other.id+" after the kill", func() bool {
		list, err := cliDeadLetters(t, other, "kc/in")
		if err != nil {
			t.Log(err)
			return false
		}
		after = list
		return len(list) >= len(wants)
	})
	check("on "+other.id+", after the kill", after)
	stored := map[string]time.Time{}
	for _, d := range before {
		stored[fmt.Sprintf("%d@%d", d.Partition, d.Offset)] = d.StoredAt
	}
	for _, d := range after {
		if at := stored[fmt.Sprintf("%d@%d", d.Partition, d.Offset)]; !at.Equal(d.StoredAt) {
			t.Errorf("the dead letter of in/%d@%d was stored at %v before the kill and at %v after: not the same record", d.Partition, d.Offset, at, d.StoredAt)
		}
	}
}

// TestClusterResendToAnotherPartition re-sends a message dead letter to an
// address of another partition, from the third node (neither the dead
// letter's holder nor the target's owner): the holder removes the dead
// letter and sends the re-send, in the same transaction, as a command to
// the target's owner, which applies it once. The answer is the committed
// re-send; the target counts the message once on every node and on the
// Kafka egress; the receipt and the audit record (op resend, reverting
// the skip) are read from every node; a second re-send is a 404. The
// holder is then killed with SIGKILL: the node that restores its
// partitions from their changelogs does not bring the dead letter back.
func TestClusterResendToAnotherPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	brokers, nodes := startWriteCluster(t, "resendx")
	own := owners(t, brokers, "resendx")
	holder, targetOwner, asker := nodes[0], nodes[1], nodes[2]
	id, far := idsOwnedBy(own, holder.id, "dl", 1), idsOwnedBy(own, targetOwner.id, "far", 1)
	if len(id) == 0 || len(far) == 0 {
		t.Fatalf("no ids owned by %s and %s in %v", holder.id, targetOwner.id, own)
	}

	// A message to id, paused, skipped: a dead letter on the holder.
	deadLetter := skipBehindPause(t, asker, asker, id[0])

	resend := "/dead-letters/messages/" + url.PathEscape(deadLetter) + "/resend"
	r := asker.api(t, http.MethodPost, resend, `{"target":{"namespace":"kc","type":"counter","id":"`+far[0]+`"},"reason":"to the right one"}`,
		"Content-Type", "application/json")
	var sent struct {
		Mutation string `json:"mutation"`
		Status   string `json:"status"`
		Address  struct {
			ID string `json:"id"`
		} `json:"address"`
	}
	if err := json.Unmarshal(r.body, &sent); err != nil || r.status != http.StatusOK || sent.Status != "committed" || sent.Address.ID != far[0] {
		t.Fatalf("re-send of %s's dead letter to %s (partition %d) from %s: %d %s; want 200 committed",
			id[0], far[0], address.Partition(far[0], 8), asker.id, r.status, r.body)
	}
	waitCounts(t, nodes, map[string]int{far[0]: 1}, 30*time.Second)
	if r := targetOwner.api(t, http.MethodPost, resend, ""); r.status != http.StatusNotFound {
		t.Errorf("second re-send from %s: %d %s; want 404", targetOwner.id, r.status, r.body)
	}
	for _, n := range nodes {
		if rc, status := storedReceipt(t, n, sent.Mutation); status != 200 || rc.Status != "committed" {
			t.Errorf("the re-send's receipt from %s: %d %+v", n.id, status, rc)
		}
		recs := auditOf(t, n, sent.Mutation)
		if len(recs) != 1 || recs[0]["op"] != "resend" || recs[0]["reverts"] != deadLetter || recs[0]["reason"] != "to the right one" {
			t.Errorf("the re-send's audit record, from %s: %v", n.id, recs)
		}
	}
	egress := func(key string) []string { return countsOf(t, brokers, key) }
	waitFor(t, 30*time.Second, "the count of "+far[0]+" on the egress", func() bool { return len(egress(far[0])) >= 1 })
	if got := egress(far[0]); len(got) != 1 || got[0] != far[0]+"=1" {
		t.Errorf("egress records of %s: %v; want [%s=1]", far[0], got, far[0])
	}
	if got := egress(id[0]); len(got) != 0 {
		t.Errorf("egress records of %s, whose message was re-sent elsewhere: %v; want none", id[0], got)
	}

	// The holder dies; its partitions are restored elsewhere, and the
	// dead letter is not among what comes back.
	holder.kill()
	survivors := []*clusterNode{targetOwner, asker}
	waitServing(t, 90*time.Second, survivors...)
	for _, n := range survivors {
		if r := n.api(t, http.MethodGet, "/dead-letters/messages/"+url.PathEscape(deadLetter), ""); r.status != http.StatusNotFound {
			t.Errorf("the dead letter read from %s after %s was killed: %d %s; want 404", n.id, holder.id, r.status, r.body)
		}
		if r := n.api(t, http.MethodPost, resend, ""); r.status != http.StatusNotFound {
			t.Errorf("a re-send from %s after %s was killed: %d %s; want 404", n.id, holder.id, r.status, r.body)
		}
	}
	waitCounts(t, survivors, map[string]int{far[0]: 1}, 30*time.Second)
}
