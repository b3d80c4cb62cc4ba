package connlimit

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what the listeners did with the connections they accepted.
type Metrics struct {
	accepted *prometheus.CounterVec
}

// NewMetrics creates the counters and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_listener_connections_total",
			Help: "Connections accepted, by listener and outcome (served, served_after_closing_idle, answered_503, closed).",
		}, []string{"listener", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.accepted)
	}
	return m
}

func (m *Metrics) admitted(listener, outcome string) {
	if m != nil {
		m.accepted.WithLabelValues(listener, outcome).Inc()
	}
}
