package engine

import (
	"bytes"
	"context"
	"sync"

	"github.com/statefun-go/statefun/internal/idempotency"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// inflight holds the idempotency keys whose request is being made durable,
// with their fingerprints. A key is in it from before its store lookup until
// its commit is durable (or failed), so a second request with the key either
// finds it here or finds its record in the store — never neither.
type inflight struct {
	mu   sync.Mutex
	keys map[onceKey][]byte
}

type onceKey struct{ scope, key string }

// claim marks k as in progress, or returns the error for a request that
// finds it so.
func (f *inflight) claim(k onceKey, fp []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if have, ok := f.keys[k]; ok {
		if !bytes.Equal(have, fp) {
			return idempotency.ErrMismatch
		}
		return idempotency.ErrInProgress
	}
	if f.keys == nil {
		f.keys = map[onceKey][]byte{}
	}
	f.keys[k] = fp
	return nil
}

func (f *inflight) release(k onceKey) {
	f.mu.Lock()
	delete(f.keys, k)
	f.mu.Unlock()
}

// onceWrite is the idempotency record an ingress request writes with its
// message.
type onceWrite struct {
	k   onceKey
	rec store.IdempotencyRecord
}

// IngestOnce is Ingest for a request that carries an idempotency key: the
// key's record is written in the same synced batch as the message, so
// whatever crashes, the message exists exactly when the record does. A
// request whose key (in its scope) was accepted before returns replayed
// true and makes no message; with a different fingerprint it returns
// idempotency.ErrMismatch; while the first request with the key is still
// being made durable it returns idempotency.ErrInProgress. Refused requests
// (ErrBusy, a store error) leave no record, so a retry is a new attempt.
func (e *Engine) IngestOnce(ctx context.Context, env *protocol.Envelope, r idempotency.Request) (replayed bool, err error) {
	req, replayed, err := e.ingestOnce(env, r, true)
	if err != nil || replayed {
		return replayed, err
	}
	return false, e.awaitIngress(ctx, req)
}

// ingestOnce starts IngestOnce: it answers a replay or a refusal at once,
// or hands the message and the key's record to the committer.
func (e *Engine) ingestOnce(env *protocol.Envelope, r idempotency.Request, paced bool) (*ingressReq, bool, error) {
	if e.closed.Load() {
		return nil, false, ErrClosed
	}
	k := onceKey{r.Scope, r.Key}
	if err := e.once.claim(k, r.Fingerprint); err != nil {
		return nil, false, err
	}
	rec, found, err := e.db.Idempotency(r.Scope, r.Key)
	if err != nil || found {
		e.once.release(k)
		switch {
		case err != nil:
			return nil, false, err
		case !bytes.Equal(rec.Fingerprint, r.Fingerprint):
			return nil, false, idempotency.ErrMismatch
		}
		e.m.ingressReplayed.Inc()
		return nil, true, nil
	}
	req, err := e.ingestReq(env, &onceWrite{k: k, rec: store.IdempotencyRecord{At: e.opts.Now().UnixMilli(), Fingerprint: r.Fingerprint}}, paced)
	if err != nil {
		e.once.release(k)
		return nil, false, err
	}
	return req, false, nil
}
