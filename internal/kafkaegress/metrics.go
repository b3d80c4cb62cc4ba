package kafkaegress

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Prometheus collectors of every Kafka egress relay of a
// runtime, labelled by egress id.
type Metrics struct {
	records       *prometheus.CounterVec
	transactions  *prometheus.CounterVec
	errors        *prometheus.CounterVec
	undeliverable *prometheus.CounterVec
	lost          *prometheus.CounterVec
	position      *prometheus.GaugeVec
	connected     *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_egress_records_total",
			Help: "Records delivered to Kafka and removed from the outbox, by egress (exactly-once: committed; at-least-once: acknowledged by Kafka; none: handed to the producer).",
		}, []string{"egress"}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_egress_transactions_total",
			Help: "Kafka transactions of exactly-once egresses, by egress and outcome (committed, aborted, unknown: the commit's answer was lost and the marker topic decides).",
		}, []string{"egress", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_egress_errors_total",
			Help: "Failed attempts, retried with backoff, by egress and stage (connect, resume, produce, commit, outbox).",
		}, []string{"egress", "stage"}),
		undeliverable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_egress_undeliverable_total",
			Help: "Outbox records that do not decode as a valid KafkaProducerRecord (only a damaged store or a lowered size limit gets them there); logged with their position and skipped.",
		}, []string{"egress"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_egress_lost_total",
			Help: "Records of a delivery-semantic none egress that the producer failed to deliver after they left the outbox.",
		}, []string{"egress"}),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_kafka_egress_position",
			Help: "The highest outbox position delivered and removed, by egress.",
		}, []string{"egress"}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_kafka_egress_connected",
			Help: "1 when the egress's last exchange with Kafka succeeded, 0 while it is failing or stalled (the reason is in /readyz).",
		}, []string{"egress"}),
	}
	if reg != nil {
		reg.MustRegister(m.records, m.transactions, m.errors, m.undeliverable, m.lost, m.position, m.connected)
	}
	return m
}
