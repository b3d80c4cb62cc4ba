package store

import "fmt"

// spaceJob holds the bulk jobs of the state API (internal/jobs): each
// job's definition, status, counters and cursor, by job id. In embedded
// mode no partition commit writes it: the job runner writes a record on
// its own, synced, each time its cursor moves (PutJob). In cluster mode
// the record is written by a commit of the job's home partition
// (Batch.PutJob), so it travels in that partition's changelog and moves
// with it (docs/reference/storage.md, "0x20 bulk jobs").
const spaceJob byte = 0x20

// jobKey appends the key of one job's record.
//
//	+------+-------------+
//	| 0x20 | str(job id) |
//	+------+-------------+
//
// The value is the job's record as JSON (internal/jobs.Record): a job is
// read and written whole, by one process, and its layout is the API's.
func jobKey(dst []byte, id string) []byte {
	dst = append(dst, spaceJob)
	return appendString(dst, id)
}

// PutJob writes the record of job id, replacing an earlier one, and
// returns once it is durable (a synced commit of its own).
func (db *DB) PutJob(id string, record []byte) error {
	b := db.NewBatch()
	b.set(jobKey(b.key[:0], id), record)
	return b.Commit(true)
}

// PutJob writes the record of job id into the batch: in cluster mode, the
// commit of the job's home partition, whose changelog then carries it.
func (b *Batch) PutJob(id string, record []byte) {
	b.set(jobKey(b.key[:0], id), record)
}

// DeleteJob deletes the record of job id in the batch (a tombstone in the
// home partition's changelog, in cluster mode).
func (b *Batch) DeleteJob(id string) {
	b.delete(jobKey(b.key[:0], id))
}

// DeleteJob removes the record of job id, synced.
func (db *DB) DeleteJob(id string) error {
	b := db.NewBatch()
	b.delete(jobKey(b.key[:0], id))
	return b.Commit(true)
}

// ScanJobs calls fn with every job's id and record, in id order, until fn
// returns an error (returned).
func (db *DB) ScanJobs(fn func(id string, record []byte) error) error {
	it, err := db.newIter([]byte{spaceJob}, []byte{spaceJob + 1})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		id, rest, err := decodeString(key[1:])
		if err == nil && len(rest) != 0 {
			err = errBadKey
		}
		if err != nil {
			return finish(it, corrupt(key, err))
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return finish(it, fmt.Errorf("store: read %s: %w", formatKey(key), err))
		}
		if err := fn(id, append([]byte(nil), val...)); err != nil {
			return finish(it, err)
		}
	}
	return finish(it, nil)
}
