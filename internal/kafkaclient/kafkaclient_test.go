package kafkaclient

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/module"
)

// prop is one property of a test module.
type prop struct{ k, v string }

// yamlProps writes props as module.yaml's list of single-key maps; values
// are double-quoted so that JAAS lines and PEM text survive.
func yamlProps(props []prop) string {
	if len(props) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("  properties:\n")
	for _, p := range props {
		fmt.Fprintf(&b, "    - %s: %s\n", p.k, strconv.Quote(p.v))
	}
	return b.String()
}

// ingress parses a Kafka ingress with props; its properties start on line
// 10.
func ingress(t *testing.T, props ...prop) *module.KafkaIngress {
	t.Helper()
	return ingressAt(t, "localhost:9092", props...)
}

// ingressAt is ingress with the bootstrap address addr.
func ingressAt(t *testing.T, addr string, props ...prop) *module.KafkaIngress {
	t.Helper()
	src := "kind: io.statefun.kafka.v1/ingress\nspec:\n  id: a/in\n  address: " + addr + "\n  consumerGroupId: g\n" +
		"  topics:\n    - {topic: t, valueType: a/v, targets: [a/f]}\n  startupPosition: {type: earliest}\n" + yamlProps(props)
	m, err := module.Parse("module.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m.KafkaIngresses[0]
}

// egress parses a Kafka egress with semantic ("" for the default) and
// props; its properties start on line 7.
func egress(t *testing.T, semantic string, props ...prop) *module.KafkaEgress {
	t.Helper()
	return egressAt(t, "localhost:9092", semantic, props...)
}

// egressAt is egress with the bootstrap address addr.
func egressAt(t *testing.T, addr, semantic string, props ...prop) *module.KafkaEgress {
	t.Helper()
	sem := "  deliverySemantic: {type: at-least-once}\n"
	switch semantic {
	case "exactly-once":
		sem = "  deliverySemantic: {type: exactly-once, transactionTimeout: 1min}\n"
	case "none":
		sem = "  deliverySemantic: {type: none}\n"
	}
	src := "kind: io.statefun.kafka.v1/egress\nspec:\n  id: a/out\n  address: " + addr + "\n" + sem + yamlProps(props)
	m, err := module.Parse("module.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m.KafkaEgresses[0]
}

// client builds a franz-go client from opts (it does not connect), so
// that the options' values can be read back and franz-go's own validation
// of their combination runs.
func client(t *testing.T, opts []kgo.Opt, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), extra...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestConsumerMappings(t *testing.T) {
	for _, tc := range []struct {
		props []prop
		opt   any
		want  any
	}{
		{nil, kgo.FetchIsolationLevel, int8(1)}, // read_committed by default
		{[]prop{{"isolation.level", "read_committed"}}, kgo.FetchIsolationLevel, int8(1)},
		{nil, kgo.SeedBrokers, []string{"localhost:9092"}},
		{[]prop{{"client.id", "statefun-in"}}, kgo.ClientID, "statefun-in"},
		{[]prop{{"fetch.min.bytes", "1024"}}, kgo.FetchMinBytes, int32(1024)},
		{[]prop{{"fetch.max.bytes", "1048576"}}, kgo.FetchMaxBytes, int32(1048576)},
		{[]prop{{"max.partition.fetch.bytes", "65536"}}, kgo.FetchMaxPartitionBytes, int32(65536)},
		{[]prop{{"fetch.max.wait.ms", "250"}}, kgo.FetchMaxWait, 250 * time.Millisecond},
		{[]prop{{"session.timeout.ms", "10000"}}, kgo.SessionTimeout, 10 * time.Second},
		{[]prop{{"heartbeat.interval.ms", "2000"}}, kgo.HeartbeatInterval, 2 * time.Second},
		{[]prop{{"max.poll.interval.ms", "120000"}}, kgo.RebalanceTimeout, 2 * time.Minute},
		{[]prop{{"metadata.max.age.ms", "30000"}}, kgo.MetadataMaxAge, 30 * time.Second},
		{[]prop{{"connections.max.idle.ms", "60000"}}, kgo.ConnIdleTimeout, time.Minute},
		{[]prop{{"socket.connection.setup.timeout.ms", "5000"}}, kgo.DialTimeout, 5 * time.Second},
		{[]prop{{"group.instance.id", "node-1"}}, kgo.InstanceID, "node-1"},
		{[]prop{{"client.rack", "rack-a"}}, kgo.Rack, "rack-a"},
		{[]prop{{"check.crcs", "false"}}, kgo.DisableFetchCRCValidation, true},
		{[]prop{{"allow.auto.create.topics", "true"}}, kgo.AllowAutoTopicCreation, true},
	} {
		name := "defaults"
		if len(tc.props) > 0 {
			name = tc.props[0].k
		}
		t.Run(name, func(t *testing.T) {
			c, err := ForIngress(ingress(t, tc.props...), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Warnings) != 0 {
				t.Errorf("warnings: %v", c.Warnings)
			}
			cl := client(t, c.Opts, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
			if got := cl.OptValue(tc.opt); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%v = %v (%T), want %v (%T)", name, got, got, tc.want, tc.want)
			}
		})
	}
}

func TestConsumerSettings(t *testing.T) {
	c, err := ForIngress(ingress(t), nil)
	if err != nil || c.MaxPollRecords != 500 {
		t.Fatalf("default MaxPollRecords = %v, %v", c, err)
	}
	c, err = ForIngress(ingress(t, prop{"max.poll.records", "100"}), nil)
	if err != nil || c.MaxPollRecords != 100 {
		t.Fatalf("MaxPollRecords = %v, %v", c, err)
	}
	c, err = ForIngress(ingress(t, prop{"partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	bs := client(t, c.Opts, kgo.ConsumerGroup("g")).OptValue(kgo.Balancers).([]kgo.GroupBalancer)
	if len(bs) != 1 || bs[0].ProtocolName() != "cooperative-sticky" {
		t.Errorf("balancers = %v", bs)
	}
	c, err = ForIngress(ingress(t, prop{"retry.backoff.ms", "50"}, prop{"retry.backoff.max.ms", "400"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	fn := client(t, c.Opts).OptValue(kgo.RetryBackoffFn).(func(int) time.Duration)
	if fn(1) != 50*time.Millisecond || fn(2) != 100*time.Millisecond || fn(10) != 400*time.Millisecond {
		t.Errorf("backoff = %v %v %v", fn(1), fn(2), fn(10))
	}
}

func TestProducerMappings(t *testing.T) {
	for _, tc := range []struct {
		semantic string
		props    []prop
		opt      any
		want     any
	}{
		{"at-least-once", nil, kgo.RequiredAcks, kgo.AllISRAcks()},
		{"at-least-once", nil, kgo.DisableIdempotentWrite, false},
		{"exactly-once", nil, kgo.TransactionTimeout, time.Minute},
		{"exactly-once", []prop{{"acks", "all"}}, kgo.RequiredAcks, kgo.AllISRAcks()},
		{"at-least-once", []prop{{"acks", "-1"}}, kgo.RequiredAcks, kgo.AllISRAcks()},
		{"at-least-once", []prop{{"enable.idempotence", "false"}}, kgo.DisableIdempotentWrite, true},
		{"none", []prop{{"acks", "1"}}, kgo.RequiredAcks, kgo.LeaderAck()},
		{"none", []prop{{"acks", "0"}}, kgo.RequiredAcks, kgo.NoAck()},
		{"none", []prop{{"acks", "0"}}, kgo.DisableIdempotentWrite, true},
		{"at-least-once", []prop{{"linger.ms", "20"}}, kgo.ProducerLinger, 20 * time.Millisecond},
		{"at-least-once", []prop{{"max.request.size", "2097152"}}, kgo.ProducerBatchMaxBytes, int32(2097152)},
		{"at-least-once", []prop{{"compression.type", "zstd"}}, kgo.ProducerBatchCompression, []kgo.CompressionCodec{kgo.ZstdCompression()}},
		{"at-least-once", []prop{{"compression.type", "lz4"}}, kgo.ProducerBatchCompression, []kgo.CompressionCodec{kgo.Lz4Compression()}},
		{"at-least-once", []prop{{"delivery.timeout.ms", "120000"}}, kgo.RecordDeliveryTimeout, 2 * time.Minute},
		{"at-least-once", []prop{{"request.timeout.ms", "30000"}}, kgo.ProduceRequestTimeout, 30 * time.Second},
		{"at-least-once", []prop{{"retries", "7"}}, kgo.RecordRetries, int64(7)},
		{"at-least-once", []prop{{"buffer.memory", "33554432"}}, kgo.MaxBufferedBytes, int64(33554432)},
		{"none", []prop{{"acks", "1"}, {"max.in.flight.requests.per.connection", "3"}}, kgo.MaxProduceRequestsInflightPerBroker, int64(3)},
		{"at-least-once", []prop{{"client.id", "statefun-out"}}, kgo.ClientID, "statefun-out"},
	} {
		name := tc.semantic
		if len(tc.props) > 0 {
			name += "/" + tc.props[0].k + "=" + tc.props[0].v
		}
		t.Run(name, func(t *testing.T) {
			p, err := ForEgress(egress(t, tc.semantic, tc.props...), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Warnings) != 0 {
				t.Errorf("warnings: %v", p.Warnings)
			}
			extra := []kgo.Opt{}
			if tc.semantic == "exactly-once" {
				extra = append(extra, kgo.TransactionalID("x"))
			}
			got := client(t, p.Opts, extra...).OptValue(tc.opt)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v (%T), want %v (%T)", got, got, tc.want, tc.want)
			}
		})
	}
	p, err := ForEgress(egress(t, "exactly-once", prop{"transactional.id", "my-app"}), nil)
	if err != nil || p.TransactionalID != "my-app" {
		t.Errorf("TransactionalID = %+v, %v", p, err)
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ingress  bool
		semantic string
		props    []prop
		want     string // the whole first error
	}{
		{"read_uncommitted", true, "", []prop{{"isolation.level", "read_uncommitted"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.isolation.level: read_uncommitted is not supported: the ingress reads read_committed so that records of aborted transactions have no effect"},
		{"bad fetch size", true, "", []prop{{"fetch.max.bytes", "lots"}},
			`module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.fetch.max.bytes: want an integer from 1 to 2147483647, got "lots"`},
		{"unknown protocol", true, "", []prop{{"security.protocol", "TLS"}},
			`module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.security.protocol: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got "TLS"`},
		{"GSSAPI", true, "", []prop{{"security.protocol", "SASL_PLAINTEXT"}, {"sasl.mechanism", "GSSAPI"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.sasl.mechanism: sasl.mechanism GSSAPI is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"OAUTHBEARER", true, "", []prop{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "OAUTHBEARER"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.sasl.mechanism: sasl.mechanism OAUTHBEARER is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"SASL without mechanism", true, "", []prop{{"security.protocol", "SASL_PLAINTEXT"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.security.protocol: SASL needs sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default, GSSAPI, is not supported)"},
		{"SASL without JAAS", true, "", []prop{{"security.protocol", "SASL_PLAINTEXT"}, {"sasl.mechanism", "PLAIN"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.sasl.mechanism: sasl.mechanism PLAIN needs sasl.jaas.config with the username and password"},
		{"wrong login module", true, "", []prop{{"security.protocol", "SASL_PLAINTEXT"}, {"sasl.mechanism", "SCRAM-SHA-256"},
			{"sasl.jaas.config", `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`}},
			"module.yaml:12:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.sasl.jaas.config: sasl.mechanism SCRAM-SHA-256 needs the login module org.apache.kafka.common.security.scram.ScramLoginModule; this one is org.apache.kafka.common.security.plain.PlainLoginModule"},
		{"callback handler", true, "", []prop{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "PLAIN"},
			{"sasl.jaas.config", `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`},
			{"sasl.login.callback.handler.class", "com.example.Handler"}},
			"module.yaml:13:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.sasl.login.callback.handler.class: custom Java classes cannot run here; use security.protocol, sasl.mechanism PLAIN or SCRAM with sasl.jaas.config, and PEM stores"},
		{"JKS trust store", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.truststore.location", "/etc/kafka/truststore.jks"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.truststore.location: only PEM trust stores are supported (ssl.truststore.type=PEM); a JKS store cannot be read here: convert it to PEM"},
		{"PKCS12 key store", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.keystore.type", "PKCS12"}, {"ssl.keystore.location", "/k.p12"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.keystore.type: only PEM key stores are supported (ssl.keystore.type=PEM); a PKCS12 store cannot be read here: convert it to PEM"},
		{"key password", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.key.password", "hunter2"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.key.password: encrypted private keys are not supported; use an unencrypted PEM key and remove ssl.key.password"},
		{"missing trust file", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.truststore.type", "PEM"}, {"ssl.truststore.location", "/nonexistent/ca.pem"}},
			"module.yaml:12:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.truststore.location: reading the trust store: open /nonexistent/ca.pem: no such file or directory"},
		{"trust certificates not PEM", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.truststore.type", "PEM"}, {"ssl.truststore.certificates", "not a cert"}},
			"module.yaml:12:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.truststore.certificates: ssl.truststore.certificates has no PEM certificate"},
		{"endpoint identification", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.endpoint.identification.algorithm", "dns"}},
			`module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.endpoint.identification.algorithm: want https (the default) or an empty value, got "dns"`},
		{"TLS 1.0", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.enabled.protocols", "TLSv1.2,TLSv1"}},
			`module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.enabled.protocols: unsupported TLS version "TLSv1"; want TLSv1.2 and/or TLSv1.3`},
		{"unknown ssl property", true, "", []prop{{"security.protocol", "SSL"}, {"ssl.engine.factory.class", "x"}},
			"module.yaml:11:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.engine.factory.class: custom Java classes cannot run here; use security.protocol, sasl.mechanism PLAIN or SCRAM with sasl.jaas.config, and PEM stores"},

		{"no idempotence under exactly-once", false, "exactly-once", []prop{{"enable.idempotence", "false"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.enable.idempotence: enable.idempotence=false cannot be honoured under exactly-once: transactions need the idempotent producer"},
		{"acks=1 under at-least-once", false, "at-least-once", []prop{{"acks", "1"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.acks: acks=1 cannot be honoured under at-least-once: a record the leader alone acknowledged can be lost; use acks=all, or deliverySemantic none"},
		{"acks=0 under exactly-once", false, "exactly-once", []prop{{"acks", "0"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.acks: acks=0 cannot be honoured under exactly-once: a record the leader alone acknowledged can be lost; use acks=all, or deliverySemantic none"},
		{"bad acks", false, "none", []prop{{"acks", "some"}},
			`module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.acks: want all, -1, 0 or 1, got "some"`},
		{"transactional id without transactions", false, "at-least-once", []prop{{"transactional.id", "x"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.transactional.id: transactional.id applies to deliverySemantic exactly-once only; this egress is at-least-once"},
		{"too many in flight", false, "at-least-once", []prop{{"max.in.flight.requests.per.connection", "10"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.max.in.flight.requests.per.connection: at most 5 with the idempotent producer (Kafka refuses more too)"},
		{"unknown compression", false, "none", []prop{{"compression.type", "brotli"}},
			`module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.compression.type: want none, gzip, snappy, lz4 or zstd, got "brotli"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.ingress {
				_, err = ForIngress(ingress(t, tc.props...), nil)
			} else {
				_, err = ForEgress(egress(t, tc.semantic, tc.props...), nil)
			}
			var errs module.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want module.Errors", err)
			}
			if errs[0].Error() != tc.want {
				t.Errorf("got\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	for _, tc := range []struct {
		ingress bool
		props   []prop
		want    string
	}{
		{true, []prop{{"enable.auto.commit", "true"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.enable.auto.commit: ignored: the ingress commits positions to the consumer group itself, after it has stored them"},
		{true, []prop{{"ssl.truststore.location", "/x.jks"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.ssl.truststore.location: ignored: security.protocol is PLAINTEXT, which does not use TLS"},
		{true, []prop{{"sasl.jaas.config", "secret stuff"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.sasl.jaas.config: ignored: security.protocol is PLAINTEXT, which does not use SASL"},
		{true, []prop{{"value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.value.deserializer: ignored: keys and values are read as bytes, as StateFun reads them"},
		{true, []prop{{"some.future.setting", "1"}},
			"module.yaml:10:7: document 1 (io.statefun.kafka.v1/ingress): spec.properties.some.future.setting: ignored: unknown or unsupported Kafka client property"},
		{false, []prop{{"batch.size", "16384"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.batch.size: ignored: franz-go fills a batch up to max.request.size and sends it after linger.ms"},
		{false, []prop{{"transaction.timeout.ms", "1000"}},
			"module.yaml:7:7: document 1 (io.statefun.kafka.v1/egress): spec.properties.transaction.timeout.ms: ignored: transactions are used under exactly-once only; this egress is at-least-once"},
	} {
		var warns []*module.Error
		if tc.ingress {
			c, err := ForIngress(ingress(t, tc.props...), nil)
			if err != nil {
				t.Fatalf("%v: %v", tc.props, err)
			}
			warns = c.Warnings
		} else {
			p, err := ForEgress(egress(t, "", tc.props...), nil)
			if err != nil {
				t.Fatalf("%v: %v", tc.props, err)
			}
			warns = p.Warnings
		}
		if len(warns) != 1 || warns[0].Error() != tc.want {
			t.Errorf("warnings = %v\nwant %s", warns, tc.want)
		}
	}
}

func TestParseJAAS(t *testing.T) {
	j, err := ParseJAAS(`org.apache.kafka.common.security.scram.ScramLoginModule required
		username="alice" password="p\"w;d" tokenauth=true;`)
	if err != nil {
		t.Fatal(err)
	}
	if j.LoginModule != "org.apache.kafka.common.security.scram.ScramLoginModule" || j.Flag != "required" ||
		j.Options["username"] != "alice" || j.Options["password"] != `p"w;d` || j.Options["tokenauth"] != "true" {
		t.Errorf("parsed %+v", j)
	}
	for _, bad := range []string{
		"",
		`org.apache.kafka.common.security.plain.PlainLoginModule username="u" password="p";`,
		`org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p"`,
		`org.apache.kafka.common.security.plain.PlainLoginModule required username="u password=p;`,
		`org.apache.kafka.common.security.plain.PlainLoginModule required username "u";`,
		`org.apache.kafka.common.security.plain.PlainLoginModule required username="u" username="v";`,
		`m required a=b; m2 required c=d;`,
	} {
		_, err := ParseJAAS(bad)
		if !errors.Is(err, ErrJAAS) {
			t.Errorf("ParseJAAS(%q) = %v, want ErrJAAS", bad, err)
		}
	}
}

// TestCredentialsNeverShown: no error or warning carries a password, a
// JAAS line or a private key, whatever is wrong around them.
func TestCredentialsNeverShown(t *testing.T) {
	const secret = "Sup3r-Secret"
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="` + secret + `";`
	for _, props := range [][]prop{
		{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "SCRAM-SHA-512"}, {"sasl.jaas.config", jaas}},
		{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "PLAIN"}, {"sasl.jaas.config", "broken " + secret}},
		{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "PLAIN"}, {"sasl.jaas.config", `org.apache.kafka.common.security.plain.PlainLoginModule required username="` + secret + `;`}},
		{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "PLAIN"}, {"sasl.jaas.config", strings.Replace(jaas, "required", "required "+secret+"=x", 1)}},
		{{"security.protocol", "SSL"}, {"ssl.key.password", secret}, {"ssl.keystore.password", secret}, {"ssl.truststore.password", secret}},
		{{"security.protocol", "SSL"}, {"ssl.keystore.type", "PEM"}, {"ssl.keystore.certificate.chain", "x"}, {"ssl.keystore.key", "-----BEGIN PRIVATE KEY-----\n" + secret + "\n-----END PRIVATE KEY-----"}},
		{{"sasl.jaas.config", jaas}, {"sasl.password", secret}},
		{{"sasl.oauthbearer.client.credentials.client.secret", secret}},
		{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", "OAUTHBEARER"}, {"sasl.oauthbearer.token.endpoint.url", "https://x/" + secret}},
	} {
		c, err := ForIngress(ingress(t, props...), nil)
		text := fmt.Sprint(err)
		if c != nil {
			text += fmt.Sprint(c.Warnings)
		}
		if strings.Contains(text, secret) {
			t.Errorf("a message shows the secret:\n%s", text)
		}
		if text == "<nil>[]" {
			t.Errorf("no error or warning for %v", props)
		}
	}
}

// TestPEMFiles: the trust and key stores are read from PEM files (paths
// relative to the working directory, as in Kafka) or inline PEM text.
func TestPEMFiles(t *testing.T) {
	pki := newPKI(t)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	both := filepath.Join(dir, "client.pem")
	if err := os.WriteFile(ca, pki.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(both, append(append([]byte{}, pki.clientCertPEM...), pki.clientKeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, props := range [][]prop{
		{{"security.protocol", "SSL"}, {"ssl.truststore.type", "PEM"}, {"ssl.truststore.location", ca},
			{"ssl.keystore.type", "PEM"}, {"ssl.keystore.location", both}},
		{{"security.protocol", "SSL"}, {"ssl.truststore.type", "PEM"}, {"ssl.truststore.certificates", string(pki.caPEM)},
			{"ssl.keystore.type", "PEM"}, {"ssl.keystore.certificate.chain", string(pki.clientCertPEM)}, {"ssl.keystore.key", string(pki.clientKeyPEM)}},
	} {
		c, err := ForIngress(ingress(t, props...), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Warnings) != 0 {
			t.Errorf("warnings: %v", c.Warnings)
		}
		tc := client(t, c.Opts).OptValue(kgo.DialTLSConfig)
		if tc == nil {
			t.Fatalf("no TLS config")
		}
	}
}
