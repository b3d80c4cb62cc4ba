package cycle

import "fmt"

// A partition's read position in the messages topic is part of its state
// (docs/explanation/cluster.md, "Read positions"): the changelog carries the offset of
// the last record it applied in the transaction that carries the record's
// effects, and a restored partition resumes after it, whatever the group's
// committed offsets say.

// Resume is where fetching of a restored partition's messages resumes.
type Resume struct {
	// At is the offset to fetch from; -1 leaves it to the group's offset
	// (a partition that never applied a record, or whose position was
	// forgotten).
	At int64
	// Forget is set when the stored position cannot be trusted: the
	// engine must drop it, or it would skip new records as applied.
	Forget bool
	// Fault says what is wrong, for an ERROR line; Kind is its label in
	// statefun_cluster_read_position_faults_total.
	Fault, Kind string
}

// ResumeAt decides where partition p of the messages topic resumes,
// given the offset after its stored read position (has false: it has
// none) and the partition's start (the first offset Kafka keeps) and end
// (the next offset to be written).
func ResumeAt(p int32, next int64, has bool, start, end int64) Resume {
	if !has {
		return Resume{At: -1}
	}
	applied := next - 1
	switch {
	case next > end:
		// Kafka no longer has offsets the partition applied: the topic
		// was deleted and created again, or an unclean leader election
		// truncated it. Records at offsets below the position now are
		// new ones; skipping them would lose them.
		return Resume{At: -1, Forget: true, Kind: "past-end",
			Fault: fmt.Sprintf("partition %d applied the messages topic through offset %d, but the topic's partition ends at %d: it was recreated or truncated (an unclean leader election?); records from here on are taken as new, from the group's offset or the start", p, applied, end)}
	case next < start:
		// Retention deleted records this partition never applied.
		return Resume{At: start, Kind: "below-start",
			Fault: fmt.Sprintf("partition %d applied the messages topic through offset %d, but the topic's partition now starts at %d: %d records were deleted by retention before they were applied and are lost (was every node down for longer than --cluster-messages-retention?); resuming at %d", p, applied, start, start-next, start)}
	}
	return Resume{At: next}
}
