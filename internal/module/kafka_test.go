package module

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

// ki and ke make a Kafka ingress or egress document whose spec keys start
// on line 3.
func ki(body string) string { return "kind: io.statefun.kafka.v1/ingress\nspec:\n" + body }
func ke(body string) string { return "kind: io.statefun.kafka.v1/egress\nspec:\n" + body }

// ingressBody is a valid ingress spec body, lines 3 to 9.
const ingressBody = `  id: a/in
  address: kafka:9092
  consumerGroupId: g
  topics:
    - topic: t
      valueType: a/v
      targets: [a/f]
`

func tn(s string) address.TypeName {
	t, err := address.ParseTypeName(s)
	if err != nil {
		panic(err)
	}
	return t
}

func pos(line, col int) Position {
	return Position{File: "module.yaml", Document: 1, Line: line, Column: col}
}

func TestKafkaIngress(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want KafkaIngress
	}{
		{"defaults", ingressBody, KafkaIngress{
			ID: tn("a/in"), Address: "kafka:9092", ConsumerGroupID: "g", AutoOffsetReset: ResetLatest,
			Topics:  []*KafkaTopic{{Topic: "t", ValueType: "a/v", Targets: []address.TypeName{tn("a/f")}, Pos: pos(7, 7)}},
			Startup: StartupPosition{Type: StartupLatest}, Pos: pos(1, 1),
		}},
		{"every field", `  id: a/in
  address: k1:9092, k2:9093
  consumerGroupId: g
  topics:
    - topic: t
      valueType: io.statefun.types/string
      targets:
        - a/f
        - b/g
    - topic: u.v_w-1
      valueType: type.googleapis.com/pkg.Msg
      targets: [a/f]
  autoOffsetResetPosition: EARLIEST
  startupPosition:
    type: specific-offsets
    offsets:
      - t/0: 42
      - u.v_w-1/3: "7"
  properties:
    - security.protocol: SASL_SSL
    - max.poll.records: 100
    - enable.auto.commit: false
`, KafkaIngress{
			ID: tn("a/in"), Address: "k1:9092, k2:9093", ConsumerGroupID: "g", AutoOffsetReset: ResetEarliest,
			Topics: []*KafkaTopic{
				{Topic: "t", ValueType: "io.statefun.types/string", Targets: []address.TypeName{tn("a/f"), tn("b/g")}, Pos: pos(7, 7)},
				{Topic: "u.v_w-1", ValueType: "type.googleapis.com/pkg.Msg", Targets: []address.TypeName{tn("a/f")}, Pos: pos(12, 7)},
			},
			Startup: StartupPosition{Type: StartupSpecificOffsets, Pos: pos(16, 3), Offsets: []PartitionOffset{
				{Topic: "t", Partition: 0, Offset: 42, Pos: pos(19, 9)},
				{Topic: "u.v_w-1", Partition: 3, Offset: 7, Pos: pos(20, 9)},
			}},
			Properties: []KafkaProperty{
				{Key: "security.protocol", Value: "SASL_SSL", Pos: pos(22, 7), ValuePos: pos(22, 26)},
				{Key: "max.poll.records", Value: "100", Pos: pos(23, 7), ValuePos: pos(23, 25)},
				{Key: "enable.auto.commit", Value: "false", Pos: pos(24, 7), ValuePos: pos(24, 27)},
			},
			Pos: pos(1, 1),
		}},
		{"address and group from properties", `  id: a/in
  topics: [{topic: t, valueType: a/v, targets: [a/f]}]
  startupPosition: {type: date, date: "2024-03-01 08:00:00.000 +0100"}
  properties:
    - bootstrap.servers: kafka:9092
    - group.id: from-props
    - client.id: c
`, KafkaIngress{
			ID: tn("a/in"), Address: "kafka:9092", ConsumerGroupID: "from-props", AutoOffsetReset: ResetLatest,
			Topics: []*KafkaTopic{{Topic: "t", ValueType: "a/v", Targets: []address.TypeName{tn("a/f")}, Pos: pos(4, 12)}},
			Startup: StartupPosition{Type: StartupDate, Pos: pos(5, 3),
				Date: time.Date(2024, 3, 1, 7, 0, 0, 0, time.UTC)},
			Properties: []KafkaProperty{{Key: "client.id", Value: "c", Pos: pos(9, 7), ValuePos: pos(9, 18)}},
			Pos:        pos(1, 1),
		}},
		{"named fields win over properties", ingressBody + `  startupPosition: {type: group-offsets}
  properties:
    - bootstrap.servers: other:9092
    - group.id: other
    - auto.offset.reset: earliest
`, KafkaIngress{
			ID: tn("a/in"), Address: "kafka:9092", ConsumerGroupID: "g", AutoOffsetReset: ResetLatest,
			Topics:  []*KafkaTopic{{Topic: "t", ValueType: "a/v", Targets: []address.TypeName{tn("a/f")}, Pos: pos(7, 7)}},
			Startup: StartupPosition{Type: StartupGroupOffsets, Pos: pos(10, 3)}, Pos: pos(1, 1),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustParse(t, ki(tc.body))
			if len(m.KafkaIngresses) != 1 {
				t.Fatalf("got %d Kafka ingresses", len(m.KafkaIngresses))
			}
			got := *m.KafkaIngresses[0]
			if !got.Startup.Date.IsZero() {
				if !got.Startup.Date.Equal(tc.want.Startup.Date) {
					t.Errorf("date = %v, want %v", got.Startup.Date, tc.want.Startup.Date)
				}
				got.Startup.Date = tc.want.Startup.Date
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
				for i := range got.Topics {
					t.Logf("topic %+v", *got.Topics[i])
				}
			}
		})
	}
}

func TestKafkaPropertyOverridesWarn(t *testing.T) {
	m := mustParse(t, ki(ingressBody+"  properties:\n    - bootstrap.servers: other:9092\n    - auto.offset.reset: earliest\n"))
	var got []string
	for _, w := range m.Warnings {
		got = append(got, w.Error())
	}
	want := []string{
		"module.yaml: the module binds no function type (it has no io.statefun.endpoints.v2/http component), so no message can be delivered; only the state API is of use",
		"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.bootstrap.servers: property bootstrap.servers is ignored: address sets it",
		"module.yaml:12:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.auto.offset.reset: property auto.offset.reset is ignored: autoOffsetResetPosition sets it (default latest)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestKafkaEgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want KafkaEgress
	}{
		{"defaults", "  id: a/out\n  address: kafka:9092\n",
			KafkaEgress{ID: tn("a/out"), Address: "kafka:9092", Semantic: AtLeastOnce, Pos: pos(1, 1)}},
		{"exactly-once", "  id: a/out\n  address: kafka:9092\n  deliverySemantic:\n    type: exactly-once\n    transactionTimeout: 15min\n",
			KafkaEgress{ID: tn("a/out"), Address: "kafka:9092", Semantic: ExactlyOnce, TransactionTimeout: 15 * time.Minute, Pos: pos(1, 1)}},
		{"exactly-once in deprecated millis", "  id: a/out\n  address: kafka:9092\n  deliverySemantic:\n    type: exactly-once\n    transactionTimeoutMillis: 100000\n",
			KafkaEgress{ID: tn("a/out"), Address: "kafka:9092", Semantic: ExactlyOnce, TransactionTimeout: 100 * time.Second, Pos: pos(1, 1)}},
		{"millis win over the duration", "  id: a/out\n  address: kafka:9092\n  deliverySemantic:\n    type: exactly-once\n    transactionTimeout: 1h\n    transactionTimeoutMillis: 60000\n",
			KafkaEgress{ID: tn("a/out"), Address: "kafka:9092", Semantic: ExactlyOnce, TransactionTimeout: time.Minute, Pos: pos(1, 1)}},
		{"none with properties", "  id: a/out\n  address: kafka:9092\n  deliverySemantic: {type: none}\n  properties:\n    - linger.ms: 5\n    - bootstrap.servers: ignored:1\n",
			KafkaEgress{ID: tn("a/out"), Address: "kafka:9092", Semantic: NoSemantic, Pos: pos(1, 1),
				Properties: []KafkaProperty{{Key: "linger.ms", Value: "5", Pos: pos(7, 7), ValuePos: pos(7, 18)}}}},
		{"exactly-once drops transaction.timeout.ms", "  id: a/out\n  address: kafka:9092\n  deliverySemantic: {type: exactly-once, transactionTimeout: 1 min}\n  properties:\n    - transaction.timeout.ms: 5\n",
			KafkaEgress{ID: tn("a/out"), Address: "kafka:9092", Semantic: ExactlyOnce, TransactionTimeout: time.Minute, Pos: pos(1, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustParse(t, ke(tc.body))
			if len(m.KafkaEgresses) != 1 || !reflect.DeepEqual(*m.KafkaEgresses[0], tc.want) {
				t.Errorf("got %+v\nwant %+v", m.KafkaEgresses, tc.want)
			}
		})
	}
}

// TestKafkaShowcaseModule loads a module shaped like the playground's Go
// showcase: endpoint, Kafka ingress and exactly-once Kafka egress.
func TestKafkaShowcaseModule(t *testing.T) {
	m, err := Load("testdata/kafka-showcase.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 0 || len(m.KafkaIngresses) != 1 || len(m.KafkaEgresses) != 1 || len(m.Ingresses)+len(m.Egresses) != 0 {
		t.Fatalf("module = %+v", m)
	}
	in, eg := m.KafkaIngresses[0], m.KafkaEgresses[0]
	if in.ID != tn("showcase.io/names") || in.Startup.Type != StartupEarliest || in.ConsumerGroupID != "my-group-id" ||
		in.Topics[0].Targets[0] != tn("showcase.fns/user") {
		t.Errorf("ingress = %+v", in)
	}
	if eg.ID != tn("showcase.io/greets") || eg.Semantic != ExactlyOnce || eg.TransactionTimeout != 15*time.Minute {
		t.Errorf("egress = %+v", eg)
	}
}

func TestKafkaLegacy(t *testing.T) {
	m := mustParse(t, `version: "3.0"
module:
  meta:
    type: remote
  spec:
    endpoints:
      - endpoint:
          meta: {kind: http}
          spec: {functions: a/*, urlPathTemplate: "http://h/"}
    ingresses:
      - ingress:
          meta:
            type: io.statefun.kafka/ingress
            id: a/in
          spec:
            address: kafka:9092
            consumerGroupId: g
            topics: [{topic: t, valueType: a/v, targets: [a/f]}]
    egresses:
      - egress:
          meta:
            type: io.statefun.kafka/egress
            id: a/out
          spec:
            address: kafka:9092
`)
	if len(m.KafkaIngresses) != 1 || m.KafkaIngresses[0].ID != tn("a/in") || len(m.KafkaEgresses) != 1 || m.KafkaEgresses[0].ID != tn("a/out") {
		t.Fatalf("module = %s %+v %+v", dump(m), m.KafkaIngresses, m.KafkaEgresses)
	}
}

// TestMalformedKafka: every malformed Kafka document is refused with its
// file, line, column and field, and only that error.
func TestMalformedKafka(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want string // the whole first error
	}{
		{"ingress without id", ki(strings.Replace(ingressBody, "  id: a/in\n", "", 1)),
			"module.yaml:2:1: document 1 (io.statefun.kafka.v1/ingress): spec.id: required"},
		{"ingress id not a typename", ki(strings.Replace(ingressBody, "id: a/in", "id: names", 1)),
			`module.yaml:3:7: document 1 (io.statefun.kafka.v1/ingress): spec.id: invalid typename "names": want <namespace>/<name>`},
		{"no address anywhere", ki(strings.Replace(ingressBody, "  address: kafka:9092\n", "", 1)),
			"module.yaml:2:1: document 1 (io.statefun.kafka.v1/ingress): spec.address: required: the bootstrap servers, such as kafka:9092 (or a bootstrap.servers property)"},
		{"address without port", ki(strings.Replace(ingressBody, "kafka:9092", "kafka:9092,kafka", 1)),
			`module.yaml:4:12: document 1 (io.statefun.kafka.v1/ingress): spec.address: invalid broker address "kafka": want host:port, comma-separated for several brokers`},
		{"bad bootstrap.servers property", ki(strings.Replace(ingressBody, "  address: kafka:9092\n", "", 1) + "  properties:\n    - bootstrap.servers: k:99999\n"),
			`module.yaml:10:26: document 1 (io.statefun.kafka.v1/ingress): spec.properties.bootstrap.servers: invalid broker address "k:99999": the port must be 1 to 65535`},
		{"no group", ki(strings.Replace(ingressBody, "  consumerGroupId: g\n", "", 1)),
			"module.yaml:2:1: document 1 (io.statefun.kafka.v1/ingress): spec.consumerGroupId: required: the consumer group (or a group.id property)"},
		{"misspelt group", ki(strings.Replace(ingressBody, "consumerGroupId", "consumerGroupID", 1)),
			`module.yaml:5:3: document 1 (io.statefun.kafka.v1/ingress): spec.consumerGroupID: unknown field "consumerGroupID"; did you mean "consumerGroupId"?`},
		{"empty group", ki(strings.Replace(ingressBody, "consumerGroupId: g", `consumerGroupId: ""`, 1)),
			"module.yaml:5:20: document 1 (io.statefun.kafka.v1/ingress): spec.consumerGroupId: must not be empty: it is the consumer group"},
		{"no topics", ki("  id: a/in\n  address: k:1\n  consumerGroupId: g\n"),
			"module.yaml:2:1: document 1 (io.statefun.kafka.v1/ingress): spec.topics: required"},
		{"empty topics", ki("  id: a/in\n  address: k:1\n  consumerGroupId: g\n  topics: []\n"),
			"module.yaml:6:11: document 1 (io.statefun.kafka.v1/ingress): spec.topics: an ingress needs at least one topic"},
		{"topic twice", ki(ingressBody + "    - {topic: t, valueType: a/v, targets: [a/g]}\n"),
			"module.yaml:10:15: document 1 (io.statefun.kafka.v1/ingress): spec.topics[1].topic: topic t is listed twice; it is also on line 7 (list every target of a topic in one entry)"},
		{"bad topic name", ki(strings.Replace(ingressBody, "topic: t", "topic: a/b", 1)),
			`module.yaml:7:14: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].topic: invalid topic "a/b": a topic name has only letters, digits, '.', '_' and '-'`},
		{"no valueType", ki(strings.Replace(ingressBody, "      valueType: a/v\n", "", 1)),
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].valueType: required"},
		{"valueType not a typename", ki(strings.Replace(ingressBody, "valueType: a/v", "valueType: string", 1)),
			`module.yaml:8:18: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].valueType: invalid typename "string": want <namespace>/<name>, such as io.statefun.types/string`},
		{"old typeUrl", ki(strings.Replace(ingressBody, "valueType: a/v", "typeUrl: a/v", 1)),
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].valueType: required"},
		{"no targets", ki(strings.Replace(ingressBody, "      targets: [a/f]\n", "", 1)),
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].targets: required"},
		{"empty targets", ki(strings.Replace(ingressBody, "[a/f]", "[]", 1)),
			"module.yaml:9:16: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].targets: a topic needs at least one target function type"},
		{"wildcard target", ki(strings.Replace(ingressBody, "[a/f]", "[a/*]", 1)),
			`module.yaml:9:17: document 1 (io.statefun.kafka.v1/ingress): spec.topics[0].targets[0]: invalid function type "a/*": want <namespace>/<name> (a target names one function type)`},
		{"bad reset position", ki(ingressBody + "  autoOffsetResetPosition: none\n"),
			`module.yaml:10:28: document 1 (io.statefun.kafka.v1/ingress): spec.autoOffsetResetPosition: unknown position "none"; want earliest or latest (the default)`},
		{"bad startup type", ki(ingressBody + "  startupPosition: {type: beginning}\n"),
			`module.yaml:10:27: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.type: unknown startup position "beginning"; want group-offsets, earliest, latest (the default), specific-offsets or date`},
		{"startup without type", ki(ingressBody + "  startupPosition: {date: x}\n"),
			"module.yaml:10:3: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.type: required"},
		{"date in ISO form", ki(ingressBody + "  startupPosition: {type: date, date: \"2024-03-01T08:00:00Z\"}\n"),
			`module.yaml:10:39: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.date: invalid date "2024-03-01T08:00:00Z": want yyyy-MM-dd HH:mm:ss.SSS Z, such as "2024-03-01 08:00:00.000 +0100"`},
		{"date missing", ki(ingressBody + "  startupPosition: {type: date}\n"),
			"module.yaml:10:3: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.date: required"},
		{"offsets missing", ki(ingressBody + "  startupPosition: {type: specific-offsets}\n"),
			"module.yaml:10:3: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.offsets: required"},
		{"offsets as a mapping", ki(ingressBody + "  startupPosition:\n    type: specific-offsets\n    offsets: {t/0: 1}\n"),
			`module.yaml:12:14: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.offsets: want a list of single-key maps, such as "- logins/0: 42", got a mapping (StateFun reads only the list form)`},
		{"offset without partition", ki(ingressBody + "  startupPosition:\n    type: specific-offsets\n    offsets:\n      - t: 1\n"),
			`module.yaml:13:9: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.offsets[0].t: invalid partition "t": want <topic>/<partition>, such as logins/0`},
		{"negative partition", ki(ingressBody + "  startupPosition:\n    type: specific-offsets\n    offsets:\n      - t/-1: 1\n"),
			`module.yaml:13:9: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.offsets[0].t/-1: invalid partition "t/-1": the partition is an integer from 0 to 2147483647`},
		{"negative offset", ki(ingressBody + "  startupPosition:\n    type: specific-offsets\n    offsets:\n      - t/0: -5\n"),
			"module.yaml:13:14: document 1 (io.statefun.kafka.v1/ingress): spec.startupPosition.offsets[0].t/0: -5 is out of range; want 0 to 9223372036854775807"},
		{"properties as a mapping", ki(ingressBody + "  properties: {client.id: c}\n"),
			`module.yaml:10:15: document 1 (io.statefun.kafka.v1/ingress): spec.properties: want a list of single-key maps, such as "- security.protocol: SSL", got a mapping (StateFun reads only the list form)`},
		{"two keys in one property item", ki(ingressBody + "  properties:\n    - client.id: c\n      linger.ms: 5\n"),
			`module.yaml:12:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties[0]: one property per list item: StateFun would silently drop every key after the first; start each with "- "`},
		{"property set twice", ki(ingressBody + "  properties:\n    - client.id: c\n    - client.id: d\n"),
			"module.yaml:12:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties[1].client.id: property client.id is set twice; it is also on line 11"},
		{"property without value", ki(ingressBody + "  properties:\n    - client.id:\n"),
			"module.yaml:11:17: document 1 (io.statefun.kafka.v1/ingress): spec.properties[0].client.id: want a value (a string, number or boolean), got null"},
		{"property as a string", ki(ingressBody + "  properties:\n    - client.id=c\n"),
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties[0]: want a single-key map such as \"- security.protocol: SSL\", got a str scalar"},
		{"duplicate ingress id", ki(ingressBody) + "---\n" + ki(ingressBody),
			"module.yaml:13:7: document 2 (io.statefun.kafka.v1/ingress): spec.id: Kafka ingress id a/in is already used by document 1 (module.yaml:3:7)"},
		{"playground ingress id", ki(strings.Replace(ingressBody, "a/in", "io.statefun.playground/ingress", 1)),
			"module.yaml:3:7: document 1 (io.statefun.kafka.v1/ingress): spec.id: io.statefun.playground/ingress is the fixed id of the playground's ingress; pick another id"},

		{"egress without address", ke("  id: a/out\n"),
			"module.yaml:2:1: document 1 (io.statefun.kafka.v1/egress): spec.address: required"},
		{"egress address only in properties", ke("  id: a/out\n  properties:\n    - bootstrap.servers: k:1\n"),
			"module.yaml:2:1: document 1 (io.statefun.kafka.v1/egress): spec.address: required"},
		{"unknown semantic", ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly_once}\n"),
			`module.yaml:5:28: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic.type: unknown delivery semantic "exactly_once"; want at-least-once (the default), exactly-once or none`},
		{"semantic as a string", ke("  id: a/out\n  address: k:1\n  deliverySemantic: exactly-once\n"),
			`module.yaml:5:21: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic: want a mapping, got string "exactly-once"`},
		{"exactly-once without timeout", ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly-once}\n"),
			"module.yaml:5:3: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic.transactionTimeout: required"},
		{"zero timeout", ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly-once, transactionTimeout: 0s}\n"),
			"module.yaml:5:62: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic.transactionTimeout: the transaction timeout must be larger than 0"},
		{"zero millis", ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly-once, transactionTimeoutMillis: 0}\n"),
			"module.yaml:5:68: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic.transactionTimeoutMillis: the transaction timeout must be larger than 0"},
		{"timeout too long", ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly-once, transactionTimeout: 30d}\n"),
			"module.yaml:5:62: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic.transactionTimeout: the transaction timeout 720h0m0s is too long for Kafka (at most 2147483647 ms)"},
		{"bad timeout", ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly-once, transactionTimeout: soon}\n"),
			`module.yaml:5:62: document 1 (io.statefun.kafka.v1/egress): spec.deliverySemantic.transactionTimeout: invalid duration "soon": want a number with an optional unit, such as "30s" or "2 min"`},
		{"duplicate egress id", ke("  id: a/out\n  address: k:1\n") + "---\n" + ke("  id: a/out\n  address: k:1\n"),
			"module.yaml:8:7: document 2 (io.statefun.kafka.v1/egress): spec.id: Kafka egress id a/out is already used by document 1 (module.yaml:3:7)"},
		{"playground egress id", ke("  id: io.statefun.playground/egress\n  address: k:1\n"),
			"module.yaml:3:7: document 1 (io.statefun.kafka.v1/egress): spec.id: io.statefun.playground/egress is the fixed id of the playground's egress; pick another id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("module.yaml", []byte(tc.src))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse = %v, want Errors", err)
			}
			if errs[0].Error() != tc.want || len(errs) != 1 {
				t.Errorf("got\n%v\nwant only\n%s", err, tc.want)
			}
		})
	}
}

// TestKafkaErrorsHideValues: a property value may be a credential, so no
// error or warning about properties prints it.
func TestKafkaErrorsHideValues(t *testing.T) {
	const secret = "s3cr3t-Value"
	for _, src := range []string{
		ki(ingressBody + "  properties:\n    - sasl.jaas.config: " + secret + "\n    - sasl.jaas.config: " + secret + "\n"),
		ki(ingressBody + "  properties:\n    - " + secret + "\n"),
		ki(ingressBody + "  properties:\n    - {ssl.key.password: " + secret + ", other: " + secret + "}\n"),
		ki(strings.Replace(ingressBody, "  address: kafka:9092\n", "", 1) + "  properties:\n    - bootstrap.servers: ''\n    - ssl.key.password: " + secret + "\n"),
	} {
		_, err := Parse("module.yaml", []byte(src))
		if err == nil {
			t.Fatalf("Parse accepted\n%s", src)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the value: %v", err)
		}
	}
}

// StateFun's component binders take each v1 kind also without its
// version (io.statefun.kafka/ingress, io.statefun.kafka/egress,
// io.statefun.endpoints/http), and modules still use them: they load as
// the v1 kinds.
func TestKindsWithoutVersion(t *testing.T) {
	m := mustParse(t, `kind: io.statefun.endpoints/http
spec:
  functions: example/*
  urlPathTemplate: http://functions:8000/{function.name}
---
kind: io.statefun.kafka/ingress
spec:
  id: example/in
  address: kafka:9092
  consumerGroupId: g
  topics:
    - topic: names
      valueType: example/Name
      targets: [example/greeter]
---
kind: io.statefun.kafka/egress
spec:
  id: example/out
  address: kafka:9092
`)
	if len(m.Endpoints) != 1 || m.Endpoints[0].Kind != KindHTTPEndpointV1 {
		t.Errorf("endpoints %+v; want one of kind %s", m.Endpoints, KindHTTPEndpointV1)
	}
	if len(m.KafkaIngresses) != 1 || m.KafkaIngresses[0].ID != tn("example/in") {
		t.Errorf("Kafka ingresses %+v; want example/in", m.KafkaIngresses)
	}
	if len(m.KafkaEgresses) != 1 || m.KafkaEgresses[0].ID != tn("example/out") {
		t.Errorf("Kafka egresses %+v; want example/out", m.KafkaEgresses)
	}
}

// The legacy format's bare `http`, written as a component document's kind,
// loads as the v1 endpoint (docs/reference/module.md says why it is taken).
func TestBareHTTPKindInAComponentDocument(t *testing.T) {
	m := mustParse(t, `kind: http
spec:
  functions: example/*
  urlPathTemplate: http://functions:8000/{function.name}
`)
	if len(m.Endpoints) != 1 || m.Endpoints[0].Kind != KindHTTPEndpointV1 {
		t.Errorf("endpoints %+v; want one of kind %s", m.Endpoints, KindHTTPEndpointV1)
	}
}
