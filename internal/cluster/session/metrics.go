package session

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a session's Prometheus collectors (docs/explanation/cluster.md,
// "What a node shows").
type metrics struct {
	owned      prometheus.Gauge
	restoring  prometheus.Gauge
	restoreRec prometheus.Counter
	restoreRem *prometheus.GaugeVec
	restoreDur prometheus.Histogram
	restoreErr prometheus.Counter
	txnDur     prometheus.Histogram
	txnRecords prometheus.Histogram
	txnBytes   prometheus.Histogram
	commits    prometheus.Counter
	aborts     *prometheus.CounterVec
	rebalances *prometheus.CounterVec
	lag        *prometheus.GaugeVec
	full       prometheus.Gauge
	posFaults  *prometheus.CounterVec
	culprits   prometheus.Counter
	refused    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "statefun_cluster_owned_partitions", Help: "Partitions the consumer group assigned to this node, restored or being restored.",
		}),
		restoring: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "statefun_cluster_restoring_partitions", Help: "Assigned partitions not serving yet: restoring from their changelog (on assignment, or rebuilt after an aborted transaction).",
		}),
		restoreRec: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_cluster_restore_records_total", Help: "Changelog records applied to the store by restores.",
		}),
		restoreRem: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_cluster_restore_remaining_offsets", Help: "Changelog offsets a restore under way still has to read, by partition (an upper bound of its records).",
		}, []string{"partition"}),
		restoreDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_cluster_restore_seconds", Help: "Time from a partition's assignment (or rebuild) to its serving: waiting for open transactions on its changelog, then restoring.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}),
		restoreErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_cluster_restore_errors_total", Help: "Restores that failed and are retried.",
		}),
		txnDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_cluster_txn_seconds", Help: "Kafka transaction latency of committed transactions: from Begin to the end of End (encode, produce, flush, offsets, EndTxn).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		txnRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_cluster_txn_records", Help: "Records a committed transaction produced (changelog, messages, egress).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		txnBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_cluster_txn_bytes", Help: "Key and value bytes a committed transaction produced.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 12),
		}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_cluster_txn_commits_total", Help: "Kafka transactions committed.",
		}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_cluster_txn_aborts_total", Help: "Kafka transactions aborted, by reason (group: a rebalance, a fence or a failed offset commit; produce: a record was refused; encode: a request failed to encode; fence: this node is no longer the group member it was; unowned: records of a partition not serving; ingress: an ingress record could not be routed; engine: the engine refused polled records; unconfirmed: ending the transaction failed with its outcome unknown, the brokers unreachable; unsettled: the Kafka client had not settled the partitions of a topic it produced to).",
		}, []string{"reason"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_cluster_rebalances_total", Help: "Consumer group rebalances that changed this node's partitions, by kind (assigned, revoked, lost).",
		}, []string{"kind"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_cluster_partition_lag", Help: "Offsets of the messages topic not yet polled, by owned partition, as of the last fetch of it (last stable offset minus the offset after the last polled record; a transaction marker takes an offset, so an idle partition may show 1).",
		}, []string{"partition"}),
		full: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "statefun_cluster_full_partitions", Help: "Owned partitions whose fetching is paused because their queue of messages is full (the engine's MaxBacklog or MaxBacklogBytes).",
		}),
		posFaults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_cluster_read_position_faults_total", Help: "Restored partitions whose read position in the messages topic Kafka contradicts, by kind (below-start: retention deleted records the partition never applied, which are lost; past-end: the topic was recreated or truncated, and the position was dropped).",
		}, []string{"kind"}),
		culprits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_cluster_partition_backoffs_total", Help: "Rebuilds of a partition delayed because its own work (an encoding error, a record Kafka refused) aborted the transaction.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_cluster_refused_records_total", Help: "Records Kafka refused to take into a transaction, by kind (topic: the topic does not exist, is invalid or may not be written; size: over the topic's limit; other).",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.owned, m.restoring, m.restoreRec, m.restoreRem, m.restoreDur, m.restoreErr,
			m.txnDur, m.txnRecords, m.txnBytes, m.commits, m.aborts, m.rebalances, m.lag, m.full, m.posFaults, m.culprits, m.refused)
	}
	return m
}

func label(p int32) string { return strconv.Itoa(int(p)) }
