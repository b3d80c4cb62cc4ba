package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// flaky fails its first call, then behaves like counter.
type flaky struct {
	counter
	calls atomic.Int32
}

func (f *flaky) Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	if f.calls.Add(1) == 1 {
		return nil, errors.New("connection refused")
	}
	return f.counter.Call(ctx, t, req)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The engine reads time only from Options.Now: the retry log says when the
// retry comes on that clock, and the partition's timer waits for it.
func TestInjectedClock(t *testing.T) {
	clock := &simClock{now: time.UnixMilli(1_000_000)} // 1970: far from the wall clock
	var logs syncBuffer
	db := openStore(t, vfs.NewMem(), 1)
	fn := &flaky{}
	e := newEngine(t, db, fn, func(o *Options) {
		o.Now = clock.Now
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		o.RetryBase = 40 * time.Millisecond
	})
	e.Start()
	if err := e.Ingest(context.Background(), msg("a", "1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failure to be logged", func() bool { return strings.Contains(logs.String(), "invocation failed") })
	if !strings.Contains(logs.String(), "retry_in=40ms") {
		t.Fatalf("the retry log does not say retry_in=40ms on the injected clock:\n%s", logs.String())
	}
	clock.advance(40 * time.Millisecond)
	waitFor(t, "the retry to succeed", func() bool { return count(t, e, "a") == "1" })
}
