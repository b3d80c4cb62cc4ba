package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
	"github.com/statefun-go/statefun/internal/store"
)

// limitRequests is how many round trips a limit benchmark makes: twice an
// end-to-end run's messages, since each message costs two (ingress and
// function call).
func limitRequests() int { return 2 * *flagMessages }

// opStats is what a limit benchmark reports: throughput, latency and the
// CPU time per operation of this process and, if any, of the server's.
type opStats struct {
	load           loadSummary
	cpuSelf, cpuFn time.Duration
	cpuOK          bool
	machine        machineCPU
	probe          float64
}

// measure runs drive with op, reading the CPU time of this process and of
// the server process pid (0: none) around it.
func measure(b *testing.B, pid int, op func(ctx context.Context, i int) (bool, error)) opStats {
	b.Helper()
	probe := cpuProbe()
	self0, ok1 := procCPU(os.Getpid())
	fn0, ok2 := procCPU(pid)
	m0 := readMachineCPU()
	b.StartTimer()
	res, err := drive(b.Context(), limitRequests(), *flagClients, *flagMaxTime, op)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	s := opStats{load: res.summary(), machine: readMachineCPU().minus(m0), probe: probe}
	self1, ok3 := procCPU(os.Getpid())
	fn1, ok4 := procCPU(pid)
	if pid == 0 {
		fn0, fn1, ok2, ok4 = 0, 0, true, true
	}
	s.cpuSelf, s.cpuFn, s.cpuOK = self1-self0, fn1-fn0, ok1 && ok2 && ok3 && ok4
	return s
}

func (s opStats) report(b *testing.B, what string) {
	l := s.load
	b.ReportMetric(l.rate(), what+"/s")
	b.ReportMetric(ms(l.P50), "p50-ms")
	b.ReportMetric(ms(l.P99), "p99-ms")
	b.Logf("%d %s from %d clients in %.2fs: %.0f/s; latency p50 %.2f ms, p99 %.2f ms",
		l.OK, what, *flagClients, l.Elapsed.Seconds(), l.rate(), ms(l.P50), ms(l.P99))
	if s.cpuOK {
		wall := l.Elapsed.Seconds()
		b.Logf("cpu: this process %.2f cores, server process %.2f cores; %.1f µs + %.1f µs per %s",
			s.cpuSelf.Seconds()/wall, s.cpuFn.Seconds()/wall,
			1e6*s.cpuSelf.Seconds()/float64(l.OK), 1e6*s.cpuFn.Seconds()/float64(l.OK), what)
		if m := s.machine; m.ok {
			b.Logf("machine: %.2f cores busy (of which irq+softirq %.2f); cpu probe %.0f MB/s sha256", m.busy/wall, m.irq/wall, s.probe)
			if other := m.others(wall, s.cpuSelf, s.cpuFn); other > 0.1 {
				b.Logf("WARNING: other processes took %.2f cores during the run; these figures are not clean", other)
			}
		}
	}
}

// BenchmarkLoopbackHTTP is the load generator of BenchmarkEndToEnd against
// a server that does nothing (emptyHandler): the price of one loopback
// HTTP/1.1 round trip on this machine, client and server included. The
// server runs in this process or in a child process.
func BenchmarkLoopbackHTTP(b *testing.B) {
	for _, where := range []string{"inprocess", "process"} {
		b.Run("server="+where, func(b *testing.B) {
			b.StopTimer()
			addr, pid := "", 0
			if where == "process" {
				addr, pid = startServer(b, "empty")
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				srv := &http.Server{Handler: emptyHandler{}, ReadHeaderTimeout: 10 * time.Second}
				go srv.Serve(ln)
				b.Cleanup(func() { srv.Close() })
				addr = ln.Addr().String()
			}
			url := "http://" + addr + "/" + sdktest.CounterFn + "/id"
			client := newLoadClient(*flagClients)
			defer client.CloseIdleConnections()
			var s opStats
			for range b.N {
				s = measure(b, pid, postOp(client, func(int) string { return url }, []byte("1")))
			}
			s.report(b, "requests")
		})
	}
}

// BenchmarkFunctionCalls calls sdktest/counter in a child process with the
// runtime's invoker, -load.clients calls in flight over 10,000 ids, each
// request shaped like the runtime's at 10,000 addresses: one invocation,
// the state count attached. It is BenchmarkEndToEnd without the ingress,
// the partitions and the store; internal/invoker's BenchmarkInvokeLoopback
// is the same call with at most GOMAXPROCS in flight.
func BenchmarkFunctionCalls(b *testing.B) {
	b.StopTimer()
	addr, pid := startServer(b, "counter")
	url := "http://" + addr + "/statefun"
	c, err := invoker.New(invoker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const ids = 10_000
	reqs := make([]*protocol.ToFunction, ids)
	for i := range reqs {
		reqs[i] = sdktest.Request(sdktest.Address(sdktest.CounterFn, fmt.Sprintf("id-%d", i)),
			[]*protocol.ToFunction_PersistedValue{sdktest.State(sdktest.CounterState, sdktest.Int64Value(int64(i)))},
			sdktest.Invocation(nil, sdktest.RawValue("io.statefun.types/string", []byte("1"))))
	}
	op := func(ctx context.Context, i int) (bool, error) {
		from, err := c.Invoke(ctx, url, reqs[i%ids])
		if err != nil {
			return false, err
		}
		if from.GetInvocationResult() == nil {
			return false, errors.New("bench: the counter did not answer an InvocationResponse")
		}
		return false, nil
	}
	var s opStats
	for range b.N {
		s = measure(b, pid, op)
	}
	s.report(b, "calls")
}

// BenchmarkSyncedCommit writes batches shaped like the group commits of
// BenchmarkEndToEnd at 10,000 addresses to a store on disk, one batch after
// the other as the committer does: per message, the ingress record, then
// the result (state, egress record, partition meta, inbox deletion). It
// reports the time per commit with and without sync; the difference is the
// price of the sync, the rest is building and applying the batch.
func BenchmarkSyncedCommit(b *testing.B) {
	for _, msgs := range []int{1, 10, 100} {
		for _, sync := range []bool{true, false} {
			b.Run(fmt.Sprintf("messages=%d/sync=%v", msgs, sync), func(b *testing.B) {
				b.StopTimer()
				db, err := store.Open(b.TempDir(), store.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				counter, _ := address.ParseTypeName(sdktest.CounterFn)
				commits := max(200, min(5000, 2*limitRequests()/(msgs*10)))
				seq := uint64(0)
				var elapsed time.Duration
				for range b.N {
					b.StartTimer()
					start := time.Now()
					for range commits {
						batch := db.NewBatch()
						for range msgs {
							seq++
							id := fmt.Sprintf("id-%d", seq%10_000)
							p := address.Partition(id, db.Partitions())
							key := store.InboxKey{Partition: p, Source: store.SourceIngress, Seq: seq}
							batch.PutInbox(key, &protocol.Envelope{
								Target:   &protocol.Address{Namespace: counter.Namespace, Type: counter.Name, Id: id},
								Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte("1")},
							})
							batch.PutState(address.Address{Type: counter, ID: id}, sdktest.CounterState,
								store.Entry{Typename: sdktest.TypeInt64, Value: []byte{8, byte(seq)}, Version: seq})
							batch.PutEgress(sdktest.PlaygroundEgress, sdktest.CounterTopic, seq, &protocol.EgressRecord{
								EgressNamespace: "io.statefun.playground", EgressType: "egress",
								Argument: &protocol.TypedValue{Typename: sdktest.EgressRecordType, HasValue: true,
									Value: fmt.Appendf(nil, `{"topic":"counter","payload":"%s:%d"}`, id, seq)},
							})
							batch.PutMeta(p, store.PartitionMeta{CommitID: seq, VersionSeq: seq})
							batch.DeleteInbox(key)
						}
						if err := batch.Commit(sync); err != nil {
							b.Fatal(err)
						}
					}
					elapsed = time.Since(start)
					b.StopTimer()
				}
				per := elapsed / time.Duration(commits)
				b.ReportMetric(float64(per.Microseconds()), "us/commit")
				b.ReportMetric(float64(msgs)/per.Seconds(), "msgs/s")
			})
		}
	}
}
