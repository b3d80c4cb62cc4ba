package jobs

import "github.com/prometheus/client_golang/prometheus"

// metrics are the jobs' Prometheus metrics (docs/reference/metrics.md).
type metrics struct {
	backoffs prometheus.Counter
}

// newMetrics registers the jobs' metrics on reg (nil: none); the pace
// gauge reads m's running jobs.
func newMetrics(reg prometheus.Registerer, m *Manager) *metrics {
	out := &metrics{backoffs: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "statefun_job_pace_backoffs_total",
		Help: "Times a running bulk job cut its pace because the functions' load slowed its writes (they queued) or their calls to remote functions (their round trips rose above their base), or a partition was full.",
	})}
	if reg == nil {
		return out
	}
	reg.MustRegister(out.backoffs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "statefun_job_pace_writes_per_second",
		Help: "The writes a second the running bulk jobs allow themselves now (their adaptive pace, summed; 0 when none runs).",
	}, m.paceSum))
	return out
}

// paceSum is the pace of the running jobs, summed.
func (m *Manager) paceSum() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum float64
	for _, rn := range m.runs {
		sum += rn.pace.view().Rate
	}
	return sum
}
