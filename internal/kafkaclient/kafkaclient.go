// Package kafkaclient turns the Kafka client properties of a module.yaml
// Kafka ingress or egress (the Java client's property names, as StateFun
// passes them to Kafka) into franz-go client options.
//
// Every property gets one of three treatments, decided per property:
//
//   - honoured: mapped to the franz-go option with the same effect;
//   - refused: an error at the property's file:line when ignoring it would
//     weaken security (a JKS store, GSSAPI, a custom callback class) or the
//     delivery guarantee (enable.idempotence=false under exactly-once, acks
//     other than all where records must not be lost, read_uncommitted on an
//     ingress that promises exactly-once effects);
//   - ignored with a warning: the property has no franz-go counterpart and
//     ignoring it changes neither; the caller logs the warning once.
//
// docs/explanation/kafka.md has the whole table. Property values may be credentials:
// no error or warning of this package contains the value of a sensitive
// property (see Sensitive), and a JAAS configuration is never echoed.
package kafkaclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/statefun-go/statefun/internal/module"
)

// DefaultMaxPollRecords is Kafka's max.poll.records default: the most
// records one poll hands to the ingress.
const DefaultMaxPollRecords = 500

// Consumer is the client configuration of a Kafka ingress.
type Consumer struct {
	// Opts are the client options: seed brokers, security, client id,
	// fetch sizes, group timeouts and the read_committed isolation level.
	// They name no topic, group or start offset: the ingress decides
	// those from the module's fields and its stored positions.
	Opts []kgo.Opt
	// MaxPollRecords is max.poll.records, DefaultMaxPollRecords unless set.
	MaxPollRecords int
	// Warnings are properties that are ignored; log each once.
	Warnings []*module.Error
}

// Producer is the client configuration of a Kafka egress.
type Producer struct {
	// Opts are the client options: seed brokers, security, client id,
	// acks, idempotence, batching, compression and timeouts, and under
	// exactly-once the transaction timeout. They carry no transactional
	// id: the egress picks one (see TransactionalID).
	Opts []kgo.Opt
	// TransactionalID is transactional.id as written, set only under
	// exactly-once; empty when the egress should pick its own.
	TransactionalID string
	// Warnings are properties that are ignored; log each once.
	Warnings []*module.Error
}

// ReadFile reads the PEM files that properties name (ssl.truststore.location,
// ssl.keystore.location). os.ReadFile unless a test replaces it.
type ReadFile func(path string) ([]byte, error)

// ForIngress maps the properties of in to consumer options. It returns
// module.Errors, every refused or invalid property at its position, when
// any property cannot be honoured. read may be nil for os.ReadFile.
func ForIngress(in *module.KafkaIngress, read ReadFile) (*Consumer, error) {
	m := newMapper(in.Properties, module.KindKafkaIngress, read)
	c := &Consumer{MaxPollRecords: DefaultMaxPollRecords}
	m.opts = append(m.opts, kgo.SeedBrokers(Brokers(in.Address)...))
	m.security()
	m.common()
	m.consumer(c)
	m.leftovers()
	if len(m.errs) > 0 {
		return nil, m.errs
	}
	c.Opts, c.Warnings = m.opts, m.warns
	return c, nil
}

// ForEgress maps the properties of eg to producer options, honouring its
// delivery semantic. It returns module.Errors, every refused or invalid
// property at its position, when any property cannot be honoured. read may
// be nil for os.ReadFile.
func ForEgress(eg *module.KafkaEgress, read ReadFile) (*Producer, error) {
	m := newMapper(eg.Properties, module.KindKafkaEgress, read)
	p := &Producer{}
	m.opts = append(m.opts, kgo.SeedBrokers(Brokers(eg.Address)...))
	m.security()
	m.common()
	m.producer(p, eg)
	m.leftovers()
	if len(m.errs) > 0 {
		return nil, m.errs
	}
	p.Opts, p.Warnings = m.opts, m.warns
	return p, nil
}

// Brokers splits a comma-separated bootstrap list (module.yaml's address)
// into its host:port entries.
func Brokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Sensitive reports whether the value of property key may be a secret: a
// password, a JAAS configuration, a private key, or an OAuth setting. The
// values of such properties appear in no message.
func Sensitive(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "password") || strings.Contains(k, "jaas") || strings.Contains(k, "secret") ||
		strings.Contains(k, "token") || strings.Contains(k, "credential") || k == "ssl.keystore.key" ||
		strings.HasPrefix(k, "sasl.oauthbearer.")
}

// mapper maps one component's properties; each handled property is marked
// used, and leftovers warns about the rest.
type mapper struct {
	kind  string
	field string // prefix of a property's field name in messages
	read  ReadFile
	props map[string]module.KafkaProperty
	order []string
	used  map[string]bool

	opts  []kgo.Opt
	errs  module.Errors
	warns []*module.Error
}

func newMapper(props []module.KafkaProperty, kind string, read ReadFile) *mapper {
	if read == nil {
		read = os.ReadFile
	}
	m := &mapper{kind: kind, field: "spec.properties.", read: read, props: make(map[string]module.KafkaProperty), used: make(map[string]bool)}
	for _, p := range props {
		m.props[p.Key] = p
		m.order = append(m.order, p.Key)
	}
	return m
}

// get returns property key and marks it handled.
func (m *mapper) get(key string) (module.KafkaProperty, bool) {
	p, ok := m.props[key]
	if ok {
		m.used[key] = true
	}
	return p, ok
}

// at builds an error or warning about property p.
func (m *mapper) at(p module.KafkaProperty, msg string) *module.Error {
	return &module.Error{File: p.Pos.File, Document: p.Pos.Document, Line: p.Pos.Line, Column: p.Pos.Column,
		Kind: m.kind, Field: m.field + p.Key, Msg: msg}
}

// refuse records that p cannot be honoured.
func (m *mapper) refuse(p module.KafkaProperty, format string, args ...any) {
	m.errs = append(m.errs, m.at(p, fmt.Sprintf(format, args...)))
}

// ignore records that p is ignored, with why.
func (m *mapper) ignore(p module.KafkaProperty, why string) {
	m.warns = append(m.warns, m.at(p, "ignored: "+why))
}

// shown is p's value for a message: quoted, or a placeholder when the
// property is sensitive.
func shown(p module.KafkaProperty) string {
	if Sensitive(p.Key) {
		return "(value hidden)"
	}
	return strconv.Quote(p.Value)
}

// integer reads p as an integer in [lo, hi].
func (m *mapper) integer(p module.KafkaProperty, lo, hi int64) (int64, bool) {
	v, err := strconv.ParseInt(strings.TrimSpace(p.Value), 10, 64)
	if err != nil || v < lo || v > hi {
		m.refuse(p, "want an integer from %d to %d, got %s", lo, hi, shown(p))
		return 0, false
	}
	return v, true
}

// millis reads p as milliseconds in [lo, hi].
func (m *mapper) millis(p module.KafkaProperty, lo, hi int64) (time.Duration, bool) {
	v, ok := m.integer(p, lo, hi)
	return time.Duration(v) * time.Millisecond, ok
}

// boolean reads p as true or false, as Java's config parser does.
func (m *mapper) boolean(p module.KafkaProperty) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(p.Value)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	m.refuse(p, "want true or false, got %s", shown(p))
	return false, false
}

const maxInt32 = 1<<31 - 1

// common maps the properties both sides share.
func (m *mapper) common() {
	if p, ok := m.get("client.id"); ok {
		m.opts = append(m.opts, kgo.ClientID(p.Value))
	}
	if p, ok := m.get("metadata.max.age.ms"); ok {
		if d, ok := m.millis(p, 1, maxInt32); ok {
			m.opts = append(m.opts, kgo.MetadataMaxAge(d))
		}
	}
	if p, ok := m.get("connections.max.idle.ms"); ok {
		if d, ok := m.millis(p, 1, 1<<62/int64(time.Millisecond)); ok {
			m.opts = append(m.opts, kgo.ConnIdleTimeout(d))
		}
	}
	if p, ok := m.get("socket.connection.setup.timeout.ms"); ok {
		if d, ok := m.millis(p, 1, maxInt32); ok {
			m.opts = append(m.opts, kgo.DialTimeout(d))
		}
	}
	// retry.backoff.ms and retry.backoff.max.ms shape one exponential
	// backoff, as in the Java client since Kafka 3.7 (defaults 100 ms and
	// 1 s).
	base, max := 100*time.Millisecond, time.Second
	pb, okb := m.get("retry.backoff.ms")
	pm, okm := m.get("retry.backoff.max.ms")
	if okb || okm {
		good := true
		if okb {
			base, good = m.millis(pb, 0, maxInt32)
		}
		if okm {
			var g bool
			max, g = m.millis(pm, 0, maxInt32)
			good = good && g
		}
		if good {
			max = maxDuration(max, base)
			m.opts = append(m.opts, kgo.RetryBackoffFn(func(tries int) time.Duration {
				d := base
				for i := 1; i < tries && d < max; i++ {
					d *= 2
				}
				return min(d, max)
			}))
		}
	}
	for _, k := range []string{"reconnect.backoff.ms", "reconnect.backoff.max.ms"} {
		if p, ok := m.get(k); ok {
			m.ignore(p, "franz-go reconnects with its retry backoff (retry.backoff.ms, retry.backoff.max.ms)")
		}
	}
}

func maxDuration(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// consumer maps the consumer-only properties.
func (m *mapper) consumer(c *Consumer) {
	// read_committed is the default here, unlike Kafka's: the ingress
	// promises exactly-once effects, which records of aborted
	// transactions would break.
	m.opts = append(m.opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if p, ok := m.get("isolation.level"); ok {
		switch strings.ToLower(strings.TrimSpace(p.Value)) {
		case "read_committed":
		case "read_uncommitted":
			m.refuse(p, "read_uncommitted is not supported: the ingress reads read_committed so that records of aborted transactions have no effect")
		default:
			m.refuse(p, "want read_committed, got %s", shown(p))
		}
	}
	type intOpt struct {
		key    string
		lo, hi int64
		opt    func(int64) kgo.Opt
	}
	for _, o := range []intOpt{
		{"fetch.min.bytes", 1, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMinBytes(int32(v)) }},
		{"fetch.max.bytes", 1, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMaxBytes(int32(v)) }},
		{"max.partition.fetch.bytes", 1, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMaxPartitionBytes(int32(v)) }},
		{"fetch.max.wait.ms", 0, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMaxWait(time.Duration(v) * time.Millisecond) }},
		{"session.timeout.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.SessionTimeout(time.Duration(v) * time.Millisecond) }},
		{"heartbeat.interval.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.HeartbeatInterval(time.Duration(v) * time.Millisecond) }},
		// The Java consumer uses max.poll.interval.ms as its rebalance
		// timeout.
		{"max.poll.interval.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.RebalanceTimeout(time.Duration(v) * time.Millisecond) }},
	} {
		if p, ok := m.get(o.key); ok {
			if v, ok := m.integer(p, o.lo, o.hi); ok {
				m.opts = append(m.opts, o.opt(v))
			}
		}
	}
	if p, ok := m.get("max.poll.records"); ok {
		if v, ok := m.integer(p, 1, maxInt32); ok {
			c.MaxPollRecords = int(v)
		}
	}
	if p, ok := m.get("group.instance.id"); ok {
		m.opts = append(m.opts, kgo.InstanceID(p.Value))
	}
	if p, ok := m.get("client.rack"); ok {
		m.opts = append(m.opts, kgo.Rack(p.Value))
	}
	if p, ok := m.get("check.crcs"); ok {
		if v, ok := m.boolean(p); ok && !v {
			m.opts = append(m.opts, kgo.DisableFetchCRCValidation())
		}
	}
	if p, ok := m.get("allow.auto.create.topics"); ok {
		if v, ok := m.boolean(p); ok && v {
			m.opts = append(m.opts, kgo.AllowAutoTopicCreation())
		}
	}
	if p, ok := m.get("group.protocol"); ok {
		switch strings.ToLower(strings.TrimSpace(p.Value)) {
		case "classic":
		case "consumer":
			m.opts = append(m.opts, kgo.ServerSideBalancer())
		default:
			m.refuse(p, "want classic or consumer, got %s", shown(p))
		}
	}
	if p, ok := m.get("partition.assignment.strategy"); ok {
		var bs []kgo.GroupBalancer
		for _, s := range strings.Split(p.Value, ",") {
			s = strings.TrimSpace(s)
			switch s[strings.LastIndexByte(s, '.')+1:] {
			case "RangeAssignor":
				bs = append(bs, kgo.RangeBalancer())
			case "RoundRobinAssignor":
				bs = append(bs, kgo.RoundRobinBalancer())
			case "StickyAssignor":
				bs = append(bs, kgo.StickyBalancer())
			case "CooperativeStickyAssignor":
				bs = append(bs, kgo.CooperativeStickyBalancer())
			default:
				m.refuse(p, "unknown assignor %q; want the Kafka RangeAssignor, RoundRobinAssignor, StickyAssignor or CooperativeStickyAssignor", s)
				bs = nil
			}
		}
		if len(bs) > 0 {
			m.opts = append(m.opts, kgo.Balancers(bs...))
		}
	}
	if p, ok := m.get("enable.auto.commit"); ok {
		m.ignore(p, "the ingress commits positions to the consumer group itself, after it has stored them")
	}
	if p, ok := m.get("auto.commit.interval.ms"); ok {
		m.ignore(p, "the ingress commits positions to the consumer group itself, after it has stored them")
	}
	for _, k := range []string{"key.deserializer", "value.deserializer"} {
		if p, ok := m.get(k); ok {
			m.ignore(p, "keys and values are read as bytes, as StateFun reads them")
		}
	}
	for _, k := range []string{"request.timeout.ms", "default.api.timeout.ms", "exclude.internal.topics", "receive.buffer.bytes", "send.buffer.bytes"} {
		if p, ok := m.get(k); ok {
			m.ignore(p, "franz-go has no such setting for a consumer; it bounds each request itself")
		}
	}
}

// producer maps the producer-only properties under eg's semantic.
func (m *mapper) producer(out *Producer, eg *module.KafkaEgress) {
	sem := eg.Semantic
	needsAll := sem == module.ExactlyOnce || sem == module.AtLeastOnce
	idempotent := true
	if p, ok := m.get("enable.idempotence"); ok {
		if v, ok := m.boolean(p); ok && !v {
			if sem == module.ExactlyOnce {
				m.refuse(p, "enable.idempotence=false cannot be honoured under exactly-once: transactions need the idempotent producer")
			} else {
				idempotent = false
			}
		}
	}
	acks := "all"
	if p, ok := m.get("acks"); ok {
		switch strings.TrimSpace(strings.ToLower(p.Value)) {
		case "all", "-1":
		case "0", "1":
			acks = strings.TrimSpace(p.Value)
			if needsAll {
				m.refuse(p, "acks=%s cannot be honoured under %s: a record the leader alone acknowledged can be lost; use acks=all, or deliverySemantic none", acks, sem)
			}
		default:
			m.refuse(p, "want all, -1, 0 or 1, got %s", shown(p))
		}
	}
	switch {
	case acks == "all" && idempotent:
		m.opts = append(m.opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case acks == "all":
		m.opts = append(m.opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite())
	default:
		// franz-go's idempotent producer needs acks=all; without it the
		// Java client turns idempotence off too.
		a := kgo.LeaderAck()
		if acks == "0" {
			a = kgo.NoAck()
		}
		m.opts = append(m.opts, kgo.RequiredAcks(a), kgo.DisableIdempotentWrite())
	}
	if sem == module.ExactlyOnce {
		m.opts = append(m.opts, kgo.TransactionTimeout(eg.TransactionTimeout))
		if p, ok := m.get("transactional.id"); ok {
			out.TransactionalID = p.Value
		}
	} else {
		if p, ok := m.get("transactional.id"); ok {
			m.refuse(p, "transactional.id applies to deliverySemantic exactly-once only; this egress is %s", sem)
		}
		if p, ok := m.get("transaction.timeout.ms"); ok {
			m.ignore(p, fmt.Sprintf("transactions are used under exactly-once only; this egress is %s", sem))
		}
	}
	if p, ok := m.get("max.in.flight.requests.per.connection"); ok {
		if v, ok := m.integer(p, 1, maxInt32); ok {
			switch {
			case idempotent && acks == "all" && v > 5:
				m.refuse(p, "at most 5 with the idempotent producer (Kafka refuses more too)")
			case idempotent && acks == "all":
				m.ignore(p, "franz-go's idempotent producer keeps at most 5 requests in flight per broker itself")
			default:
				m.opts = append(m.opts, kgo.MaxProduceRequestsInflightPerBroker(int(v)))
			}
		}
	}
	if p, ok := m.get("compression.type"); ok {
		codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
			"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
		if c, ok := codecs[strings.ToLower(strings.TrimSpace(p.Value))]; ok {
			m.opts = append(m.opts, kgo.ProducerBatchCompression(c))
		} else {
			m.refuse(p, "want none, gzip, snappy, lz4 or zstd, got %s", shown(p))
		}
	}
	type intOpt struct {
		key    string
		lo, hi int64
		opt    func(int64) kgo.Opt
	}
	for _, o := range []intOpt{
		{"linger.ms", 0, maxInt32, func(v int64) kgo.Opt { return kgo.ProducerLinger(time.Duration(v) * time.Millisecond) }},
		// franz-go fills batches up to this size; a bigger record is
		// refused, as the Java client refuses one over max.request.size.
		{"max.request.size", 1, maxInt32, func(v int64) kgo.Opt { return kgo.ProducerBatchMaxBytes(int32(v)) }},
		{"delivery.timeout.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.RecordDeliveryTimeout(time.Duration(v) * time.Millisecond) }},
		{"request.timeout.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.ProduceRequestTimeout(time.Duration(v) * time.Millisecond) }},
		{"retries", 0, maxInt32, func(v int64) kgo.Opt { return kgo.RecordRetries(int(v)) }},
		{"buffer.memory", 1, 1 << 62, func(v int64) kgo.Opt { return kgo.MaxBufferedBytes(int(v)) }},
	} {
		if p, ok := m.get(o.key); ok {
			if v, ok := m.integer(p, o.lo, o.hi); ok {
				m.opts = append(m.opts, o.opt(v))
			}
		}
	}
	if p, ok := m.get("batch.size"); ok {
		m.ignore(p, "franz-go fills a batch up to max.request.size and sends it after linger.ms")
	}
	if p, ok := m.get("partitioner.class"); ok {
		m.ignore(p, "records are partitioned by key hash as by Kafka's default partitioner")
	}
	for _, k := range []string{"key.serializer", "value.serializer"} {
		if p, ok := m.get(k); ok {
			m.ignore(p, "keys and values are written as the bytes of the KafkaProducerRecord, as StateFun writes them")
		}
	}
	for _, k := range []string{"max.block.ms", "receive.buffer.bytes", "send.buffer.bytes"} {
		if p, ok := m.get(k); ok {
			m.ignore(p, "franz-go has no such setting for a producer")
		}
	}
}

// leftovers handles the properties no mapping used: those that would
// change security when ignored are refused, the rest warned about.
func (m *mapper) leftovers() {
	for _, k := range m.order {
		if m.used[k] {
			continue
		}
		p := m.props[k]
		lk := strings.ToLower(k)
		switch {
		case strings.HasSuffix(lk, ".class") && (strings.HasPrefix(lk, "sasl.") || strings.HasPrefix(lk, "ssl.") || strings.HasPrefix(lk, "security.")):
			m.refuse(p, "custom Java classes cannot run here; use security.protocol, sasl.mechanism PLAIN or SCRAM with sasl.jaas.config, and PEM stores")
		case strings.HasPrefix(lk, "sasl.") || strings.HasPrefix(lk, "ssl.") || strings.HasPrefix(lk, "security."):
			m.refuse(p, "unsupported security property; ignoring it could weaken security (supported: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.*, ssl.keystore.* of type PEM, ssl.endpoint.identification.algorithm, ssl.enabled.protocols)")
		default:
			m.ignore(p, "unknown or unsupported Kafka client property")
		}
	}
}

// tlsVersions maps ssl.enabled.protocols names to versions.
var tlsVersions = map[string]uint16{"TLSv1.2": tls.VersionTLS12, "TLSv1.3": tls.VersionTLS13}

// security maps security.protocol and the SASL and SSL properties.
func (m *mapper) security() {
	proto := "PLAINTEXT"
	pp, set := m.get("security.protocol")
	if set {
		proto = strings.ToUpper(strings.TrimSpace(pp.Value))
		switch proto {
		case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
		default:
			m.refuse(pp, "want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got %s", shown(pp))
			return
		}
	}
	useTLS := proto == "SSL" || proto == "SASL_SSL"
	useSASL := proto == "SASL_PLAINTEXT" || proto == "SASL_SSL"

	if useTLS {
		if c, ok := m.tlsConfig(); ok {
			m.opts = append(m.opts, kgo.DialTLSConfig(c))
		}
	} else {
		for _, k := range m.order {
			if strings.HasPrefix(k, "ssl.") {
				m.used[k] = true
				m.ignore(m.props[k], "security.protocol is "+proto+", which does not use TLS")
			}
		}
	}
	if useSASL {
		if mech, ok := m.sasl(); ok {
			m.opts = append(m.opts, kgo.SASL(mech))
		}
	} else {
		for _, k := range m.order {
			if strings.HasPrefix(k, "sasl.") {
				m.used[k] = true
				m.ignore(m.props[k], "security.protocol is "+proto+", which does not use SASL")
			}
		}
	}
}

// sasl builds the SASL mechanism from sasl.mechanism and sasl.jaas.config.
func (m *mapper) sasl() (sasl.Mechanism, bool) {
	mp, ok := m.get("sasl.mechanism")
	if !ok {
		pp := m.props["security.protocol"]
		m.refuse(pp, "SASL needs sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default, GSSAPI, is not supported)")
		return nil, false
	}
	mech := strings.ToUpper(strings.TrimSpace(mp.Value))
	var wantModule string
	switch mech {
	case "PLAIN":
		wantModule = "org.apache.kafka.common.security.plain.PlainLoginModule"
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		wantModule = "org.apache.kafka.common.security.scram.ScramLoginModule"
	case "GSSAPI", "OAUTHBEARER", "AWS_MSK_IAM":
		m.refuse(mp, "sasl.mechanism %s is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
		return nil, false
	default:
		m.refuse(mp, "unknown sasl.mechanism %s; want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", shown(mp))
		return nil, false
	}
	jp, ok := m.get("sasl.jaas.config")
	if !ok {
		m.refuse(mp, "sasl.mechanism %s needs sasl.jaas.config with the username and password", mech)
		return nil, false
	}
	j, err := ParseJAAS(jp.Value)
	if err != nil {
		m.refuse(jp, "%v", err)
		return nil, false
	}
	if j.LoginModule != wantModule {
		m.refuse(jp, "sasl.mechanism %s needs the login module %s; this one is %s", mech, wantModule, j.LoginModule)
		return nil, false
	}
	user, pass := j.Options["username"], j.Options["password"]
	if user == "" || pass == "" {
		m.refuse(jp, "the login module needs username and password options")
		return nil, false
	}
	other := 0
	for name := range j.Options {
		switch name {
		case "username", "password":
		case "tokenauth":
			if mech == "PLAIN" {
				m.refuse(jp, "option tokenauth applies to SCRAM only")
				return nil, false
			}
		default:
			other++
		}
	}
	if other > 0 {
		// Not named: a misplaced quote can turn a password into an
		// option name.
		m.warns = append(m.warns, m.at(jp, fmt.Sprintf("ignored: %d login module option(s) other than username, password and tokenauth", other)))
	}
	switch mech {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), true
	default:
		a := scram.Auth{User: user, Pass: pass, IsToken: strings.EqualFold(j.Options["tokenauth"], "true")}
		if mech == "SCRAM-SHA-256" {
			return a.AsSha256Mechanism(), true
		}
		return a.AsSha512Mechanism(), true
	}
}

// errNoCert is returned by parse helpers when PEM data has no certificate.
var errNoCert = errors.New("no PEM certificate")

// tlsConfig builds the TLS configuration from the ssl.* properties.
func (m *mapper) tlsConfig() (*tls.Config, bool) {
	before := len(m.errs)
	c := &tls.Config{MinVersion: tls.VersionTLS12}

	// Trust store.
	ttype := "JKS" // Kafka's default store type
	tp, typeSet := m.get("ssl.truststore.type")
	if typeSet {
		ttype = strings.ToUpper(strings.TrimSpace(tp.Value))
	}
	tl, locSet := m.get("ssl.truststore.location")
	tc, certsSet := m.get("ssl.truststore.certificates")
	if p, ok := m.get("ssl.truststore.password"); ok {
		m.refuse(p, "a PEM trust store has no password; remove ssl.truststore.password")
	}
	if locSet || certsSet || typeSet {
		switch {
		case ttype != "PEM":
			at := tp
			if !typeSet {
				at = tl
				if !locSet {
					at = tc
				}
			}
			m.refuse(at, "only PEM trust stores are supported (ssl.truststore.type=PEM); a %s store cannot be read here: convert it to PEM", ttype)
		case locSet && certsSet:
			m.refuse(tc, "set ssl.truststore.location or ssl.truststore.certificates, not both")
		case locSet:
			data, err := m.read(tl.Value)
			if err != nil {
				m.refuse(tl, "reading the trust store: %v", err)
			} else if pool, err := certPool(data); err != nil {
				m.refuse(tl, "the trust store %s has %v", tl.Value, err)
			} else {
				c.RootCAs = pool
			}
		case certsSet:
			if pool, err := certPool([]byte(tc.Value)); err != nil {
				m.refuse(tc, "ssl.truststore.certificates has %v", err)
			} else {
				c.RootCAs = pool
			}
		default:
			m.refuse(tp, "ssl.truststore.type=PEM needs ssl.truststore.location or ssl.truststore.certificates")
		}
	}

	// Key store (mutual TLS).
	ktype := "JKS"
	kp, ktypeSet := m.get("ssl.keystore.type")
	if ktypeSet {
		ktype = strings.ToUpper(strings.TrimSpace(kp.Value))
	}
	kl, klSet := m.get("ssl.keystore.location")
	kc, kcSet := m.get("ssl.keystore.certificate.chain")
	kk, kkSet := m.get("ssl.keystore.key")
	for _, k := range []string{"ssl.keystore.password", "ssl.key.password"} {
		if p, ok := m.get(k); ok {
			m.refuse(p, "encrypted private keys are not supported; use an unencrypted PEM key and remove %s", k)
		}
	}
	if klSet || kcSet || kkSet || ktypeSet {
		switch {
		case ktype != "PEM":
			at := kp
			if !ktypeSet {
				at = kl
				if !klSet {
					at = kc
					if !kcSet {
						at = kk
					}
				}
			}
			m.refuse(at, "only PEM key stores are supported (ssl.keystore.type=PEM); a %s store cannot be read here: convert it to PEM", ktype)
		case klSet && (kcSet || kkSet):
			m.refuse(kl, "set ssl.keystore.location or ssl.keystore.certificate.chain with ssl.keystore.key, not both")
		case klSet:
			data, err := m.read(kl.Value)
			if err != nil {
				m.refuse(kl, "reading the key store: %v", err)
			} else if cert, err := tls.X509KeyPair(data, data); err != nil {
				m.refuse(kl, "the key store %s needs a PEM certificate chain and its unencrypted private key: %v", kl.Value, keyPairError(err))
			} else {
				c.Certificates = []tls.Certificate{cert}
			}
		case kcSet && kkSet:
			if cert, err := tls.X509KeyPair([]byte(kc.Value), []byte(kk.Value)); err != nil {
				m.refuse(kk, "ssl.keystore.certificate.chain and ssl.keystore.key are no matching PEM certificate and unencrypted key: %v", keyPairError(err))
			} else {
				c.Certificates = []tls.Certificate{cert}
			}
		case kcSet:
			m.refuse(kc, "ssl.keystore.certificate.chain needs ssl.keystore.key")
		case kkSet:
			m.refuse(kk, "ssl.keystore.key needs ssl.keystore.certificate.chain")
		default:
			m.refuse(kp, "ssl.keystore.type=PEM needs ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key")
		}
	}

	if p, ok := m.get("ssl.enabled.protocols"); ok {
		var vs []uint16
		for _, s := range strings.Split(p.Value, ",") {
			v, ok := tlsVersions[strings.TrimSpace(s)]
			if !ok {
				m.refuse(p, "unsupported TLS version %q; want TLSv1.2 and/or TLSv1.3", strings.TrimSpace(s))
				vs = nil
				break
			}
			vs = append(vs, v)
		}
		if len(vs) > 0 {
			c.MinVersion, c.MaxVersion = slices.Min(vs), slices.Max(vs)
		}
	}
	if p, ok := m.get("ssl.protocol"); ok {
		if _, known := tlsVersions[strings.TrimSpace(p.Value)]; !known && strings.TrimSpace(p.Value) != "TLS" {
			m.refuse(p, "unsupported TLS version %s; want TLSv1.2 or TLSv1.3", shown(p))
		} else {
			m.ignore(p, "the TLS version is negotiated; ssl.enabled.protocols limits it")
		}
	}
	if p, ok := m.get("ssl.cipher.suites"); ok {
		m.ignore(p, "Go's TLS picks from its own secure cipher suites")
	}
	if p, ok := m.get("ssl.endpoint.identification.algorithm"); ok {
		switch strings.ToLower(strings.TrimSpace(p.Value)) {
		case "https":
		case "":
			// Kafka's way to turn host name checks off: the chain is still
			// verified against the trust store, only the name is not.
			skipHostnameCheck(c)
		default:
			m.refuse(p, "want https (the default) or an empty value, got %s", shown(p))
		}
	}
	return c, len(m.errs) == before
}

// keyPairError shortens crypto/tls's key pair errors, which never contain
// key material.
func keyPairError(err error) string {
	return strings.TrimPrefix(err.Error(), "tls: ")
}
