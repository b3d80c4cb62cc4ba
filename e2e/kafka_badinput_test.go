package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKafkaBadModule feeds malformed io.statefun.kafka.v1 ingress and
// egress documents to `statefun run`: each stops the process at once with
// the file, line, column, document and field of the problem, creates no
// store, and never shows a credential.
func TestKafkaBadModule(t *testing.T) {
	const endpoint = "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: a/*\n  urlPathTemplate: http://localhost:8000/statefun\n---\n"
	// ingress is a Kafka ingress as document 2 (from line 6); rest follows
	// its consumerGroupId line (line 10).
	ingress := func(rest string) string {
		return endpoint + "kind: io.statefun.kafka.v1/ingress\nspec:\n  id: a/in\n  address: 127.0.0.1:9092\n  consumerGroupId: g\n" + rest
	}
	const topics = "  topics:\n    - topic: names\n      valueType: a/text\n      targets: [a/b]\n" // lines 11-14
	// egress is a Kafka egress as document 2; rest follows its address
	// line (line 9).
	egress := func(rest string) string {
		return endpoint + "kind: io.statefun.kafka.v1/egress\nspec:\n  id: a/out\n  address: 127.0.0.1:9092\n" + rest
	}
	const (
		in  = "module.yaml:%s: document 2 (io.statefun.kafka.v1/ingress): "
		out = "module.yaml:%s: document 2 (io.statefun.kafka.v1/egress): "
	)
	at := func(doc, pos string) string { return strings.Replace(doc, "%s", pos, 1) }
	rows := []struct {
		name   string
		module string
		want   string
		never  []string // must not appear in the output
	}{
		{
			name:   "ingress without topics",
			module: ingress(""),
			want:   at(in, "7:1") + "spec.topics: required",
		},
		{
			name:   "unknown startupPosition type",
			module: ingress(topics + "  startupPosition:\n    type: newest\n"),
			want:   at(in, "16:11") + `spec.startupPosition.type: unknown startup position "newest"; want group-offsets, earliest, latest (the default), specific-offsets or date`,
		},
		{
			name:   "specific-offsets without offsets",
			module: ingress(topics + "  startupPosition:\n    type: specific-offsets\n"),
			want:   at(in, "15:3") + "spec.startupPosition.offsets: required",
		},
		{
			name:   "startupPosition date without time and zone",
			module: ingress(topics + "  startupPosition:\n    type: date\n    date: 2024-03-01\n"),
			want:   at(in, "17:11") + `spec.startupPosition.date: invalid date "2024-03-01": want yyyy-MM-dd HH:mm:ss.SSS Z, such as "2024-03-01 08:00:00.000 +0100"`,
		},
		{
			name:   "ingress without consumer group",
			module: endpoint + "kind: io.statefun.kafka.v1/ingress\nspec:\n  id: a/in\n  address: k:9092\n" + topics,
			want:   at(in, "7:1") + "spec.consumerGroupId: required: the consumer group (or a group.id property)",
		},
		{
			name:   "unknown ingress field",
			module: ingress(topics + "  consumerGroupID: x\n"),
			want:   at(in, "15:3") + `spec.consumerGroupID: unknown field "consumerGroupID"; did you mean "consumerGroupId"?`,
		},
		{
			name:   "refused property: SASL_SSL with GSSAPI",
			module: ingress(topics + "  properties:\n    - security.protocol: SASL_SSL\n    - sasl.mechanism: GSSAPI\n"),
			want:   at(in, "17:7") + "spec.properties.sasl.mechanism: sasl.mechanism GSSAPI is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
		},
		{
			name:   "refused property: read_uncommitted",
			module: ingress(topics + "  properties:\n    - isolation.level: read_uncommitted\n"),
			want:   at(in, "16:7") + "spec.properties.isolation.level: read_uncommitted is not supported: the ingress reads read_committed so that records of aborted transactions have no effect",
		},
		{
			name: "JAAS login module of the wrong mechanism, credentials never shown",
			module: ingress(topics + "  properties:\n    - security.protocol: SASL_PLAINTEXT\n    - sasl.mechanism: PLAIN\n" +
				"    - sasl.jaas.config: org.apache.kafka.common.security.scram.ScramLoginModule required username=\"operator\" password=\"hunter2\";\n"),
			want:  at(in, "18:7") + "spec.properties.sasl.jaas.config: sasl.mechanism PLAIN needs the login module org.apache.kafka.common.security.plain.PlainLoginModule",
			never: []string{"hunter2", "operator", "password="},
		},
		{
			name:   "exactly-once without transactionTimeout",
			module: egress("  deliverySemantic:\n    type: exactly-once\n"),
			want:   at(out, "10:3") + "spec.deliverySemantic.transactionTimeout: required",
		},
		{
			name:   "unknown delivery semantic",
			module: egress("  deliverySemantic:\n    type: exactly_once\n"),
			want:   at(out, "11:11") + `spec.deliverySemantic.type: unknown delivery semantic "exactly_once"; want at-least-once (the default), exactly-once or none`,
		},
		{
			name:   "unknown egress field",
			module: egress("  deliverySemantics:\n    type: at-least-once\n"),
			want:   at(out, "10:3") + `spec.deliverySemantics: unknown field "deliverySemantics"; did you mean "deliverySemantic"?`,
		},
		{
			name:   "egress without address",
			module: endpoint + "kind: io.statefun.kafka.v1/egress\nspec:\n  id: a/out\n",
			want:   at(out, "7:1") + "spec.address: required",
		},
		{
			name:   "refused property: acks=1 under exactly-once",
			module: egress("  deliverySemantic:\n    type: exactly-once\n    transactionTimeout: 1min\n  properties:\n    - acks: 1\n"),
			want:   at(out, "14:7") + "spec.properties.acks: acks=1 cannot be honoured under exactly-once: a record the leader alone acknowledged can be lost",
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "module.yaml"), []byte(row.module), 0o644); err != nil {
				t.Fatal(err)
			}
			ex := badRunBinary(t, dir, nil, "run", "--module", "module.yaml", "--data-dir", "data", "--admin-addr", "127.0.0.1:0")
			checkBadExit(t, ex, 1, "statefun: "+row.want)
			for _, s := range row.never {
				if strings.Contains(ex.stderr, s) {
					t.Errorf("output shows %q:\n%s", s, ex.stderr)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
				t.Errorf("a store was created for an invalid module")
			}
		})
	}
}
