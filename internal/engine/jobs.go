package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/statefun-go/statefun/internal/store"
)

// PutJob writes (or, with a nil record, deletes) the record of a bulk job
// (internal/jobs) in a commit of partition p, the job's home partition: in
// cluster mode the commit's changelog carries the record, so it is durable
// in Kafka and moves with the partition, and the partition's next owner
// finds it in its store. It returns once the commit is durable, an error
// wrapping ErrMoved when p is not this process's (or was revoked before the
// commit), or ctx's error (the record may still be written then).
func (e *Engine) PutJob(ctx context.Context, p int, id string, record []byte) error {
	if !e.opts.Owned {
		// Embedded mode keeps job records outside the partitions' commits
		// (store.DB.PutJob): a commit's changelog exists only in cluster
		// mode.
		return errors.New("engine: PutJob is cluster mode's; embedded mode writes job records to the store directly")
	}
	if p < 0 || p >= e.n {
		return fmt.Errorf("%w: %d (the application has %d)", ErrNoSuchPartition, p, e.n)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	pt, err := e.owner(p)
	if err != nil {
		return err
	}
	r := &jobReq{reqOf: reqOf{p: pt}, id: id, record: record, done: make(chan error, 1)}
	if err := e.submit(r); err != nil {
		return err
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jobReq is one job record's write in its home partition's commit.
type jobReq struct {
	reqOf
	id     string
	record []byte // nil: delete
	// skipped is why Encode wrote nothing (the partition was revoked).
	skipped error
	done    chan error
}

func (r *jobReq) Encode(b *store.Batch) error {
	if err := r.p.encodable(); err != nil {
		// Not a reason to abort the transaction and every other
		// partition's work with it: the record is not written, and its
		// writer hears why (the job stops here and goes on with the
		// partition's next owner).
		r.skipped = err
		return nil
	}
	if r.record == nil {
		b.DeleteJob(r.id)
	} else {
		b.PutJob(r.id, r.record)
	}
	r.encoded()
	return nil
}

func (r *jobReq) Durable() {
	r.settled()
	r.done <- r.skipped
}

func (r *jobReq) Fail(err error) {
	r.settled()
	r.failed(err)
	r.done <- err
}

var _ Request = (*jobReq)(nil)
