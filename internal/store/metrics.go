package store

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the store's Prometheus collectors: the sizes of the key spaces
// that retention bounds, and what retention removed. They are updated by
// each Sweep.
type Metrics struct {
	records *prometheus.GaugeVec
	bytes   *prometheus.GaugeVec
	deleted *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_store_records", Help: "Records kept in a retained key space (receipts, audit, egress, idempotency, dead-letters, message-dead-letters), counted at the last retention sweep.",
		}, []string{"space"}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_store_bytes", Help: "Approximate disk bytes of a retained key space (audit and idempotency include their indexes), estimated at the last retention sweep.",
		}, []string{"space"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_store_retention_deleted_total", Help: "Records deleted by retention, per key space (an egress record deleted here was never taken by a consumer).",
		}, []string{"space"}),
	}
	if reg != nil {
		reg.MustRegister(m.records, m.bytes, m.deleted)
	}
	return m
}

// observe publishes the result of one sweep. A nil m does nothing.
func (m *Metrics) observe(db *DB, st SweepStats) {
	if m == nil {
		return
	}
	for _, s := range []struct {
		name         string
		left, del    int
		lower, upper byte
	}{
		{"receipts", st.Receipts, st.DeletedReceipts, spaceReceipt, spaceReceipt + 1},
		{"audit", st.Audit, st.DeletedAudit, spaceAudit, spaceAuditWho + 1},
		{"egress", st.Egress, st.DeletedEgress, spaceEgress, spaceEgress + 1},
		{"idempotency", st.Idempotency, st.DeletedIdempotency, spaceIdempotency, spaceIdempotencyAge + 1},
		{"dead-letters", st.DeadLetters, st.DeletedDeadLetters, spaceDeadLetter, spaceDeadLetter + 1},
		{"message-dead-letters", st.MessageDeadLetters, st.DeletedMessageDeadLetters, spaceMessageDeadLetter, spaceMessageDeadLetter + 1},
	} {
		m.records.WithLabelValues(s.name).Set(float64(s.left))
		m.bytes.WithLabelValues(s.name).Set(float64(db.spaceBytes(s.lower, s.upper)))
		m.deleted.WithLabelValues(s.name).Add(float64(s.del))
	}
	// The audit indexes by mutation and by type sit apart from the others.
	m.bytes.WithLabelValues("audit").Add(float64(db.spaceBytes(spaceAuditMutation, spaceAuditType+1)))
	// The history has no record count: counting would scan all of it.
	m.bytes.WithLabelValues("history").Set(float64(db.spaceBytes(spaceHistory, spaceHistoryAge+1)))
	m.deleted.WithLabelValues("history").Add(float64(st.DeletedHistory))
}
