package module

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/kafkatopic"
)

// Kafka ingress and egress specs, read field by field as StateFun 3.x
// reads them (RoutableKafkaIngressSpec, GenericKafkaEgressSpec and the
// Kafka builders behind them). Where StateFun would only fail later, at run
// time, or silently drop a setting, the loader refuses the file at the
// field instead; doc.go and docs/explanation/kafka.md list those places.

// Startup positions of a Kafka ingress, the values of startupPosition.type.
const (
	// StartupGroupOffsets starts from the consumer group's committed
	// offsets, falling back to autoOffsetResetPosition.
	StartupGroupOffsets = "group-offsets"
	// StartupEarliest starts from the earliest offset of each partition.
	StartupEarliest = "earliest"
	// StartupLatest starts from the end of each partition; StateFun's
	// default.
	StartupLatest = "latest"
	// StartupSpecificOffsets starts from the offsets listed in offsets,
	// falling back to autoOffsetResetPosition for other partitions.
	StartupSpecificOffsets = "specific-offsets"
	// StartupDate starts from the first record with a timestamp at or after
	// date, falling back to autoOffsetResetPosition.
	StartupDate = "date"
)

// Offset reset positions, the values of autoOffsetResetPosition.
const (
	// ResetEarliest resets an unknown or invalid offset to the earliest.
	ResetEarliest = "earliest"
	// ResetLatest resets an unknown or invalid offset to the latest;
	// StateFun's default.
	ResetLatest = "latest"
)

// DeliverySemantic is the delivery guarantee of a Kafka egress, the value
// of deliverySemantic.type.
type DeliverySemantic string

// Delivery semantics of a Kafka egress.
const (
	// AtLeastOnce is StateFun's default: no record is lost, some may be
	// written more than once.
	AtLeastOnce DeliverySemantic = "at-least-once"
	// ExactlyOnce writes records in Kafka transactions: a read_committed
	// consumer sees each exactly once.
	ExactlyOnce DeliverySemantic = "exactly-once"
	// NoSemantic guarantees nothing: records may be lost or duplicated.
	NoSemantic DeliverySemantic = "none"
)

// StartupDateLayout is the layout of startupPosition.date, StateFun's
// pattern "yyyy-MM-dd HH:mm:ss.SSS Z" in Go's notation, for example
// "2024-03-01 08:00:00.000 +0100".
const StartupDateLayout = "2006-01-02 15:04:05.000 -0700"

// Kafka property keys that the named fields of a spec override, as
// StateFun's builders do.
const (
	propBootstrapServers   = "bootstrap.servers"
	propGroupID            = "group.id"
	propAutoOffsetReset    = "auto.offset.reset"
	propTransactionTimeout = "transaction.timeout.ms"
)

// KafkaIngress is an io.statefun.kafka.v1/ingress: a Kafka consumer whose
// records, keyed by function id, are fanned out to every target of their
// topic.
type KafkaIngress struct {
	// ID is the ingress identifier.
	ID address.TypeName
	// Address is the comma-separated bootstrap servers: the address field,
	// or the bootstrap.servers property when address is absent. Never
	// empty.
	Address string
	// ConsumerGroupID is the consumer group: the consumerGroupId field, or
	// the group.id property when consumerGroupId is absent. Never empty
	// (StateFun requires one).
	ConsumerGroupID string
	// Topics are the consumed topics with their routes, in file order, one
	// entry per topic.
	Topics []*KafkaTopic
	// AutoOffsetReset is ResetEarliest or ResetLatest (the default). It
	// decides where a partition without a valid start offset starts.
	AutoOffsetReset string
	// Startup is where consumption starts when no position is stored.
	Startup StartupPosition
	// Properties are the Kafka client properties in file order, without
	// the ones the named fields override (bootstrap.servers when address is
	// set, group.id when consumerGroupId is set, and auto.offset.reset).
	Properties []KafkaProperty
	// Pos is where the ingress's document (or legacy list entry) starts.
	Pos Position
}

// KafkaTopic is one entry of a Kafka ingress's topics.
type KafkaTopic struct {
	// Topic is the Kafka topic name.
	Topic string
	// ValueType is the typename the record value is delivered with, as
	// written ("<namespace>/<name>"); the value bytes are passed unchanged.
	ValueType string
	// Targets are the function types every record of Topic is sent to, in
	// file order; the record key is the function id.
	Targets []address.TypeName
	// Pos is where the entry starts.
	Pos Position
}

// StartupPosition is a Kafka ingress's startupPosition.
type StartupPosition struct {
	// Type is one of the Startup* constants; StartupLatest by default.
	Type string
	// Offsets are the start offsets of StartupSpecificOffsets, in file
	// order; nil for other types.
	Offsets []PartitionOffset
	// Date is the start time of StartupDate; zero for other types.
	Date time.Time
	// Pos is where startupPosition is written; zero when it is absent.
	Pos Position
}

// PartitionOffset is one entry of startupPosition.offsets: the offset of
// the first record to read from a partition.
type PartitionOffset struct {
	Topic     string
	Partition int32
	Offset    int64
	Pos       Position
}

// KafkaProperty is one Kafka client property of a Kafka ingress or egress.
// Its value may be a credential: print it only through a redacting helper.
type KafkaProperty struct {
	Key   string
	Value string
	// Pos is where the key is written; ValuePos where the value is.
	Pos      Position
	ValuePos Position
}

// KafkaEgress is an io.statefun.kafka.v1/egress: a Kafka producer for the
// KafkaProducerRecord values functions send to ID.
type KafkaEgress struct {
	// ID is the egress identifier functions address.
	ID address.TypeName
	// Address is the comma-separated bootstrap servers. Never empty.
	Address string
	// Semantic is the delivery guarantee; AtLeastOnce by default.
	Semantic DeliverySemantic
	// TransactionTimeout is the Kafka transaction timeout of ExactlyOnce;
	// zero for the other semantics.
	TransactionTimeout time.Duration
	// Properties are the Kafka client properties in file order, without
	// the ones the named fields override (bootstrap.servers, and
	// transaction.timeout.ms under ExactlyOnce).
	Properties []KafkaProperty
	// Pos is where the egress's document (or legacy list entry) starts.
	Pos Position
}

// kafkaIngress validates an io.statefun.kafka.v1/ingress spec and adds the
// ingress to the module.
func (p *parser) kafkaIngress(d *doc, spec field, pos Position) {
	o, ok := d.requireObject(spec)
	if !ok {
		return
	}
	d.knownFields(o, []string{"id", "address", "consumerGroupId", "topics", "autoOffsetResetPosition",
		"startupPosition", "properties"}, nil)
	before := len(p.errs)
	in := &KafkaIngress{Pos: pos, AutoOffsetReset: ResetLatest, Startup: StartupPosition{Type: StartupLatest}}
	idf := d.idField(o)
	in.ID, _ = d.typeName(idf)

	props := d.kafkaProperties(o.get("properties"))
	addrF := o.get("address")
	in.Address, props = d.namedOrProperty(o, addrF, props, propBootstrapServers, "the bootstrap servers, such as kafka:9092")
	groupF := o.get("consumerGroupId")
	in.ConsumerGroupID, props = d.namedOrProperty(o, groupF, props, propGroupID, "the consumer group")

	// autoOffsetResetPosition always overrides auto.offset.reset: StateFun
	// sets it from the field's default when the field is absent.
	if rf := o.get("autoOffsetResetPosition"); rf.node != nil {
		if s, ok := d.str(rf); ok {
			switch strings.ToLower(s) {
			case ResetEarliest, ResetLatest:
				in.AutoOffsetReset = strings.ToLower(s)
			default:
				d.errorf(rf.node, rf.path, "unknown position %q; want earliest or latest (the default)", s)
			}
		}
	}
	props = d.overridden(props, propAutoOffsetReset, "autoOffsetResetPosition sets it (default latest)")
	in.Properties = props

	in.Topics = d.kafkaTopics(o.get("topics"))
	if sf := o.get("startupPosition"); sf.node != nil {
		in.Startup = d.startupPosition(sf, in)
	}
	if len(p.errs) > before {
		return
	}
	if !p.claimID(d, idf, in.ID, "Kafka ingress", p.ingressIDs) {
		return
	}
	p.mod.KafkaIngresses = append(p.mod.KafkaIngresses, in)
}

// kafkaEgress validates an io.statefun.kafka.v1/egress spec and adds the
// egress to the module.
func (p *parser) kafkaEgress(d *doc, spec field, pos Position) {
	o, ok := d.requireObject(spec)
	if !ok {
		return
	}
	d.knownFields(o, []string{"id", "address", "deliverySemantic", "properties"}, nil)
	before := len(p.errs)
	eg := &KafkaEgress{Pos: pos, Semantic: AtLeastOnce}
	idf := d.idField(o)
	eg.ID, _ = d.typeName(idf)

	props := d.kafkaProperties(o.get("properties"))
	// StateFun requires the address field itself here: its egress builder
	// does not fall back to a bootstrap.servers property.
	af := o.get("address")
	if s, ok := d.requireStr(af); ok {
		if err := checkBootstrap(s); err != "" {
			d.errorf(af.node, af.path, "%s", err)
		}
		eg.Address = s
	}
	props = d.overridden(props, propBootstrapServers, "address sets it")

	if sf := o.get("deliverySemantic"); sf.node != nil {
		eg.Semantic, eg.TransactionTimeout = d.deliverySemantic(sf)
	}
	if eg.Semantic == ExactlyOnce {
		props = d.overridden(props, propTransactionTimeout, "deliverySemantic.transactionTimeout sets it")
	}
	eg.Properties = props
	if len(p.errs) > before {
		return
	}
	if !p.claimID(d, idf, eg.ID, "Kafka egress", p.egressIDs) {
		return
	}
	p.mod.KafkaEgresses = append(p.mod.KafkaEgresses, eg)
}

// claimID records id for the component in document d, reporting a second
// ingress or egress with the same id (StateFun refuses to bind it twice).
func (p *parser) claimID(d *doc, f field, id address.TypeName, what string, ids map[address.TypeName]Position) bool {
	if id == PlaygroundIngressID || id == PlaygroundEgressID {
		d.errorf(f.node, f.path, "%s is the fixed id of the playground's %s; pick another id", id, map[bool]string{true: "ingress", false: "egress"}[id == PlaygroundIngressID])
		return false
	}
	if prev, dup := ids[id]; dup {
		d.errorf(f.node, f.path, "%s id %s is already used by document %d (%s)", what, id, prev.Document, prev)
		return false
	}
	ids[id] = d.pos(f.node)
	return true
}

// idField is the id of an ingress or egress spec o: spec.id, or meta.id in
// the legacy format, which StateFun copies over spec.id.
func (d *doc) idField(o object) field {
	if d.legacyID != nil {
		return *d.legacyID
	}
	return o.get("id")
}

// typeName reads a required "<namespace>/<name>" typename.
func (d *doc) typeName(f field) (address.TypeName, bool) {
	s, ok := d.requireStr(f)
	if !ok {
		return address.TypeName{}, false
	}
	t, err := address.ParseTypeName(s)
	if err != nil {
		d.errorf(f.node, f.path, "invalid typename %q: want <namespace>/<name>", s)
		return address.TypeName{}, false
	}
	return t, true
}

// namedOrProperty reads the optional string field nf, which overrides the
// property key. When nf is absent the property's value is used instead;
// when both are absent the field is required. It returns the value and the
// properties without key.
func (d *doc) namedOrProperty(o object, nf field, props []KafkaProperty, key, what string) (string, []KafkaProperty) {
	var val string
	switch {
	case nf.node != nil:
		s, ok := d.str(nf)
		if !ok {
			return "", props
		}
		if strings.TrimSpace(s) == "" {
			d.errorf(nf.node, nf.path, "must not be empty: it is %s", what)
			return "", props
		}
		val = s
		props = d.overridden(props, key, nf.path[strings.LastIndexByte(nf.path, '.')+1:]+" sets it")
	default:
		for i, pr := range props {
			if pr.Key == key {
				val = pr.Value
				at := d.node(pr.ValuePos)
				if strings.TrimSpace(val) == "" {
					d.errorf(at, "spec.properties."+key, "must not be empty: it is %s", what)
					return "", props
				}
				if key == propBootstrapServers {
					if err := checkBootstrap(val); err != "" {
						d.errorf(at, "spec.properties."+key, "%s", err)
					}
				}
				return val, dropProperty(props, i)
			}
		}
		if nf.typo == nil {
			d.errorf(nf.parent, nf.path, "required: %s (or a %s property)", what, key)
		}
		return "", props
	}
	if key == propBootstrapServers {
		if err := checkBootstrap(val); err != "" {
			d.errorf(nf.node, nf.path, "%s", err)
		}
	}
	return val, props
}

// node returns a position-only node for errors about a property, whose
// nodes the parser no longer holds.
func (d *doc) node(p Position) *yaml.Node {
	return &yaml.Node{Line: p.Line, Column: p.Column}
}

// overridden drops the property key from props, warning that the named
// field wins over it, as in StateFun.
func (d *doc) overridden(props []KafkaProperty, key, why string) []KafkaProperty {
	for i, pr := range props {
		if pr.Key == key {
			d.warn(d.node(pr.Pos), "spec.properties."+key, fmt.Sprintf("property %s is ignored: %s", key, why))
			return dropProperty(props, i)
		}
	}
	return props
}

// dropProperty returns props without its i'th element, nil when none is
// left.
func dropProperty(props []KafkaProperty, i int) []KafkaProperty {
	out := append(props[:i:i], props[i+1:]...)
	if len(out) == 0 {
		return nil
	}
	return out
}

// checkBootstrap checks a comma-separated list of host:port brokers. It
// returns the problem as text, empty when there is none.
func checkBootstrap(s string) string {
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		i := strings.LastIndexByte(b, ':')
		if b == "" || i <= 0 {
			return fmt.Sprintf("invalid broker address %q: want host:port, comma-separated for several brokers", b)
		}
		port, err := strconv.Atoi(b[i+1:])
		if err != nil || port < 1 || port > 65535 {
			return fmt.Sprintf("invalid broker address %q: the port must be 1 to 65535", b)
		}
	}
	return ""
}

// checkTopic checks a Kafka topic name the way brokers do. It returns the
// problem as text, empty when there is none.
func checkTopic(s string) string {
	if err := kafkatopic.Check(s); err != nil {
		if s == "" {
			return err.Error()
		}
		return fmt.Sprintf("invalid topic %s: %v", kafkatopic.Quote(s), err)
	}
	return ""
}

// kafkaProperties reads properties: StateFun's list of single-key maps,
//
//	properties:
//	  - security.protocol: SASL_SSL
//	  - sasl.mechanism: PLAIN
//
// Values are scalars taken as written. Messages never print a value: it
// may be a credential.
func (d *doc) kafkaProperties(f field) []KafkaProperty {
	if f.node == nil {
		return nil
	}
	if f.node.Kind == yaml.MappingNode {
		d.errorf(f.node, f.path, "want a list of single-key maps, such as \"- security.protocol: SSL\", got a mapping (StateFun reads only the list form)")
		return nil
	}
	items, ok := d.list(f)
	if !ok {
		return nil
	}
	var props []KafkaProperty
	seen := make(map[string]int)
	for _, it := range items {
		n := it.node
		if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
			d.errorf(n, it.path, "want a single-key map such as \"- security.protocol: SSL\", got %s", describeSecret(n))
			continue
		}
		if len(n.Content) > 2 {
			// StateFun keeps only the first key and drops the others.
			d.errorf(resolve(n.Content[2]), it.path, "one property per list item: StateFun would silently drop every key after the first; start each with \"- \"")
			continue
		}
		k, v := resolve(n.Content[0]), resolve(n.Content[1])
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" || strings.TrimSpace(k.Value) == "" {
			d.errorf(k, it.path, "want a property name, got %s", describe(k))
			continue
		}
		path := it.path + "." + k.Value
		if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" {
			d.errorf(v, path, "want a value (a string, number or boolean), got %s", describeSecret(v))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.errorf(k, path, "property %s is set twice; it is also on line %d", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		props = append(props, KafkaProperty{Key: k.Value, Value: v.Value, Pos: d.pos(k), ValuePos: d.pos(v)})
	}
	return props
}

// describeSecret is describe without the value of a scalar, for places
// where the value may be a credential.
func describeSecret(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		return "a " + strings.TrimPrefix(n.ShortTag(), "!!") + " scalar"
	}
	return describe(n)
}

// kafkaTopics reads the required, non-empty topics list.
func (d *doc) kafkaTopics(f field) []*KafkaTopic {
	if !d.present(f) {
		return nil
	}
	items, ok := d.list(f)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.errorf(f.node, f.path, "an ingress needs at least one topic")
		return nil
	}
	var topics []*KafkaTopic
	seen := make(map[string]int)
	for _, it := range items {
		o, ok := d.object(it)
		if !ok {
			continue
		}
		d.knownFields(o, []string{"topic", "valueType", "targets"}, map[string]string{"typeUrl": "it is the name in older formats; write valueType"})
		t := &KafkaTopic{Pos: d.pos(it.node)}
		tf := o.get("topic")
		if s, ok := d.requireStr(tf); ok {
			if err := checkTopic(s); err != "" {
				d.errorf(tf.node, tf.path, "%s", err)
			} else if line, dup := seen[s]; dup {
				// StateFun keeps the routes of the last entry only.
				d.errorf(tf.node, tf.path, "topic %s is listed twice; it is also on line %d (list every target of a topic in one entry)", s, line)
			} else {
				seen[s] = tf.node.Line
				t.Topic = s
			}
		}
		vf := o.get("valueType")
		if s, ok := d.requireStr(vf); ok {
			if _, err := address.ParseTypeNameLax(s); err != nil {
				d.errorf(vf.node, vf.path, "invalid typename %q: want <namespace>/<name>, such as io.statefun.types/string", s)
			} else {
				t.ValueType = s
			}
		}
		t.Targets = d.targets(o.get("targets"))
		topics = append(topics, t)
	}
	return topics
}

// targets reads a topic's required, non-empty list of function types.
func (d *doc) targets(f field) []address.TypeName {
	if !d.present(f) {
		return nil
	}
	items, ok := d.list(f)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		// A record with no target would be dropped without a trace.
		d.errorf(f.node, f.path, "a topic needs at least one target function type")
		return nil
	}
	var out []address.TypeName
	seen := make(map[address.TypeName]bool)
	for _, it := range items {
		s, ok := d.str(it)
		if !ok {
			continue
		}
		t, err := address.ParseTypeName(s)
		if err != nil || strings.Contains(s, "*") {
			d.errorf(it.node, it.path, "invalid function type %q: want <namespace>/<name> (a target names one function type)", s)
			continue
		}
		if seen[t] {
			d.warn(it.node, it.path, fmt.Sprintf("target %s is listed twice: each record is sent to it twice, as in StateFun", t))
		}
		seen[t] = true
		out = append(out, t)
	}
	return out
}

// startupPosition reads startupPosition {type, offsets, date}.
func (d *doc) startupPosition(f field, in *KafkaIngress) StartupPosition {
	sp := StartupPosition{Type: StartupLatest}
	o, ok := d.object(f)
	if !ok {
		return sp
	}
	sp.Pos = d.pos(f.where())
	d.knownFields(o, []string{"type", "offsets", "date"}, nil)
	tf := o.get("type")
	typ, ok := d.requireStr(tf)
	if !ok {
		return sp
	}
	switch typ {
	case StartupGroupOffsets, StartupEarliest, StartupLatest:
	case StartupSpecificOffsets:
		sp.Offsets = d.offsets(o.get("offsets"), in)
	case StartupDate:
		df := o.get("date")
		if s, ok := d.requireStr(df); ok {
			t, err := time.Parse(StartupDateLayout, s)
			if err != nil {
				d.errorf(df.node, df.path, "invalid date %q: want yyyy-MM-dd HH:mm:ss.SSS Z, such as \"2024-03-01 08:00:00.000 +0100\"", s)
			}
			sp.Date = t
		}
	default:
		d.errorf(tf.node, tf.path, "unknown startup position %q; want group-offsets, earliest, latest (the default), specific-offsets or date", typ)
		return sp
	}
	sp.Type = typ
	for _, k := range []string{"offsets", "date"} {
		if kf := o.get(k); kf.node != nil && !(k == "offsets" && typ == StartupSpecificOffsets) && !(k == "date" && typ == StartupDate) {
			d.warn(kf.key, kf.path, fmt.Sprintf("field %q is ignored: it applies to startup position %s only", k,
				map[string]string{"offsets": StartupSpecificOffsets, "date": StartupDate}[k]))
		}
	}
	return sp
}

// offsets reads specific-offsets' required list of single-key maps
// "<topic>/<partition>: offset".
func (d *doc) offsets(f field, in *KafkaIngress) []PartitionOffset {
	if !d.present(f) {
		return nil
	}
	if f.node.Kind == yaml.MappingNode {
		d.errorf(f.node, f.path, "want a list of single-key maps, such as \"- logins/0: 42\", got a mapping (StateFun reads only the list form)")
		return nil
	}
	items, ok := d.list(f)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.errorf(f.node, f.path, "specific-offsets needs at least one offset")
		return nil
	}
	consumed := make(map[string]bool)
	for _, t := range in.Topics {
		consumed[t.Topic] = true
	}
	var out []PartitionOffset
	seen := make(map[string]int)
	for _, it := range items {
		n := it.node
		if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
			d.errorf(n, it.path, "want one \"<topic>/<partition>: offset\" per list item, such as \"- logins/0: 42\"")
			continue
		}
		k, v := resolve(n.Content[0]), resolve(n.Content[1])
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, it.path, "want <topic>/<partition>, got %s", describe(k))
			continue
		}
		path := it.path + "." + k.Value
		i := strings.LastIndexByte(k.Value, '/')
		if i <= 0 || i == len(k.Value)-1 {
			d.errorf(k, path, "invalid partition %q: want <topic>/<partition>, such as logins/0", k.Value)
			continue
		}
		topic := k.Value[:i]
		part, err := strconv.ParseInt(k.Value[i+1:], 10, 32)
		if err != nil || part < 0 {
			d.errorf(k, path, "invalid partition %q: the partition is an integer from 0 to %d", k.Value, math.MaxInt32)
			continue
		}
		if e := checkTopic(topic); e != "" {
			d.errorf(k, path, "%s", e)
			continue
		}
		off, ok := d.integer(field{path: path, node: v}, 0, math.MaxInt64)
		if !ok {
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.errorf(k, path, "partition %s is listed twice; it is also on line %d", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		if len(consumed) > 0 && !consumed[topic] {
			d.warn(k, path, fmt.Sprintf("the ingress does not consume topic %s; this offset is not used", topic))
		}
		out = append(out, PartitionOffset{Topic: topic, Partition: int32(part), Offset: off, Pos: d.pos(k)})
	}
	return out
}

// deliverySemantic reads deliverySemantic {type, transactionTimeout,
// transactionTimeoutMillis}.
func (d *doc) deliverySemantic(f field) (DeliverySemantic, time.Duration) {
	o, ok := d.object(f)
	if !ok {
		return AtLeastOnce, 0
	}
	d.knownFields(o, []string{"type", "transactionTimeout", "transactionTimeoutMillis"}, nil)
	tf := o.get("type")
	typ, ok := d.requireStr(tf)
	if !ok {
		return AtLeastOnce, 0
	}
	sem := DeliverySemantic(typ)
	switch sem {
	case AtLeastOnce, NoSemantic:
		for _, k := range []string{"transactionTimeout", "transactionTimeoutMillis"} {
			if kf := o.get(k); kf.node != nil {
				d.warn(kf.key, kf.path, fmt.Sprintf("field %q is ignored: it applies to exactly-once only", k))
			}
		}
		return sem, 0
	case ExactlyOnce:
	default:
		d.errorf(tf.node, tf.path, "unknown delivery semantic %q; want at-least-once (the default), exactly-once or none", typ)
		return AtLeastOnce, 0
	}
	// The deprecated millisecond field is read first when present, as in
	// StateFun.
	var timeout time.Duration
	if mf := o.get("transactionTimeoutMillis"); mf.node != nil {
		ms, ok := d.integer(mf, 0, math.MaxInt64/int64(time.Millisecond))
		if !ok {
			return sem, 0
		}
		timeout = time.Duration(ms) * time.Millisecond
		if other := o.get("transactionTimeout"); other.node != nil {
			d.warn(other.key, other.path, "transactionTimeout is ignored: the deprecated transactionTimeoutMillis is set too and wins, as in StateFun")
		}
		if timeout == 0 {
			d.errorf(mf.node, mf.path, "the transaction timeout must be larger than 0")
			return sem, 0
		}
	} else {
		df := o.get("transactionTimeout")
		if !d.present(df) {
			return sem, 0
		}
		v, ok := d.duration(df)
		if !ok {
			return sem, 0
		}
		if v == 0 {
			d.errorf(df.node, df.path, "the transaction timeout must be larger than 0")
			return sem, 0
		}
		timeout = v
	}
	// Kafka's transaction.timeout.ms is an int of milliseconds.
	if timeout > time.Duration(math.MaxInt32)*time.Millisecond {
		at := o.get("transactionTimeoutMillis")
		if at.node == nil {
			at = o.get("transactionTimeout")
		}
		d.errorf(at.node, at.path, "the transaction timeout %v is too long for Kafka (at most %d ms)", timeout, math.MaxInt32)
		return sem, 0
	}
	if timeout < time.Millisecond {
		at := o.get("transactionTimeout")
		d.errorf(at.node, at.path, "the transaction timeout %v is shorter than a millisecond, Kafka's unit", timeout)
		return sem, 0
	}
	return sem, timeout
}
