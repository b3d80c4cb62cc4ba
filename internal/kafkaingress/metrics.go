package kafkaingress

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Kafka ingresses' Prometheus collectors, shared by every
// Kafka ingress of a process (labelled by ingress).
type Metrics struct {
	records   *prometheus.CounterVec
	bad       *prometheus.CounterVec
	busy      *prometheus.CounterVec
	connected *prometheus.GaugeVec
	commitErr *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_ingress_records_total", Help: "Kafka records made durable as messages, by ingress and topic (a record fanned out to several targets counts once).",
		}, []string{"ingress", "topic"}),
		bad: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_ingress_bad_records_total", Help: "Kafka records stored as dead letters instead of delivered, by ingress, topic and reason (null-key, empty-key, invalid-utf8-key, key-too-long, value-too-large, no-route).",
		}, []string{"ingress", "topic", "reason"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_ingress_busy_total", Help: "Batches refused because a target partition was full; fetching of their Kafka partition paused until accepted.",
		}, []string{"ingress"}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_kafka_ingress_ready", Help: "1 when the ingress reached its brokers recently (see /readyz), else 0.",
		}, []string{"ingress"}),
		commitErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_kafka_ingress_group_commit_errors_total", Help: "Failed commits of durable positions to the consumer group (best effort; only lag tools read them).",
		}, []string{"ingress"}),
	}
	if reg != nil {
		reg.MustRegister(m.records, m.bad, m.busy, m.connected, m.commitErr)
	}
	return m
}
