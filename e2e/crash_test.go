package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"

	"github.com/statefun-go/statefun/internal/sdktest"
)

var (
	crashCount = statefun.ValueSpec{Name: "count", ValueType: statefun.Int64Type}
	crashTicks = statefun.ValueSpec{Name: "ticks", ValueType: statefun.Int64Type}
	recordType = statefun.MakeJsonType(statefun.TypeNameFrom("io.statefun.playground/EgressRecord"))
	tickType   = statefun.MakeJsonType(statefun.TypeNameFrom("crash/tick"))
)

type egressRecord struct {
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
}

// crashFunction is crash/counter, written with the official Go SDK: an
// "inc" message adds one to count and reports it on topic counts; a "delay"
// message schedules a tick to itself 300 ms later, and a tick adds one to
// ticks and reports it on topic ticks.
//
// Its records go to the playground egress, or to the Kafka egress that
// route names once a runtime set it (routeEgress).
func crashFunction(t testing.TB, route *sdktest.EgressSender) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("crash/counter"),
		States:       []statefun.ValueSpec{crashCount, crashTicks},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			report := func(topic string, spec statefun.ValueSpec) {
				var n int64
				ctx.Storage().Get(spec, &n)
				n++
				ctx.Storage().Set(spec, n)
				route.Send(ctx, topic, fmt.Sprintf("%s:%d", ctx.Self().Id, n))
			}
			switch msg.ValueTypeName().String() {
			case "crash/inc":
				report("counts", crashCount)
			case "crash/delay":
				ctx.SendAfter(300*time.Millisecond, statefun.MessageBuilder{Target: ctx.Self(), Value: struct{}{}, ValueType: tickType})
			case "crash/tick":
				report("ticks", crashTicks)
			default:
				return fmt.Errorf("unexpected message type %s", msg.ValueTypeName())
			}
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// ledger is what the test knows was sent and received, per counter id.
type ledger struct {
	mu        sync.Mutex
	acked     map[string]int // 200 from the ingress: durable
	uncertain map[string]int // the connection broke mid-request
	seen      map[string]map[int]bool
	dups      []string
}

func newLedger() *ledger {
	return &ledger{acked: map[string]int{}, uncertain: map[string]int{}, seen: map[string]map[int]bool{}}
}

func (l *ledger) record(payload string) {
	id, n, _ := strings.Cut(payload, ":")
	v, _ := strconv.Atoi(n)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[id] == nil {
		l.seen[id] = map[int]bool{}
	}
	if l.seen[id][v] {
		l.dups = append(l.dups, payload)
	}
	l.seen[id][v] = true
}

// TestCrashExactlyOnce streams messages to many counters while the runtime
// is killed with SIGKILL several times. Every acknowledged message must be
// counted, no message counted twice, and delayed messages pending at a kill
// must arrive exactly once.
func TestCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	// In turn: each keeps both cores busy, and together each took over
	// twice as long.
	onEnginesInTurn(t, func(t *testing.T, e engine) {
		route := &sdktest.EgressSender{}
		fn := crashFunction(t, route)
		rt := newRuntimeOn(t, e, playgroundModule(fn, []string{"crash"}, []string{"counts", "ticks"}))
		rt.routeEgress(route)
		rt.start()

		const ids = 40
		counts, ticks := newLedger(), newLedger()
		stop := make(chan struct{})
		var senders sync.WaitGroup
		// drain holds the egress readers off while the process is killed: a
		// record popped by a GET whose answer dies with the process would be
		// lost to the test (the playground egress hands a record out once).
		var drain sync.RWMutex
		send := func(seed uint64) {
			defer senders.Done()
			rng := rand.New(rand.NewPCG(seed, seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := "c" + strconv.Itoa(rng.IntN(ids))
				kind, l := "crash/inc", counts
				if rng.IntN(10) == 0 {
					kind, l = "crash/delay", ticks
				}
				status, err := rt.send("/crash/counter/"+id, kind, "{}")
				l.mu.Lock()
				switch {
				case err == nil && status == 200:
					l.acked[id]++
				case err != nil && errors.Is(err, syscall.ECONNREFUSED):
					// never reached the runtime
				case err != nil:
					l.uncertain[id]++
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		for i := 0; i < 8; i++ {
			senders.Add(1)
			go send(uint64(i + 1))
		}
		var readers sync.WaitGroup
		read := func(topic string, l *ledger) {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				drain.RLock()
				p, ok, err := rt.pop(topic)
				drain.RUnlock()
				if ok {
					l.record(p)
				} else if err != nil || !ok {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		readers.Add(2)
		go read("counts", counts)
		go read("ticks", ticks)

		const kills = 4
		for i := 0; i < kills; i++ {
			time.Sleep(time.Duration(800+rand.IntN(800)) * time.Millisecond)
			drain.Lock()
			rt.kill()
			rt.start()
			drain.Unlock()
		}
		time.Sleep(500 * time.Millisecond)
		close(stop)
		senders.Wait()
		readers.Wait()

		// Wait for everything acknowledged to come through.
		settle := func(topic string, l *ledger) {
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				l.mu.Lock()
				done := true
				for id, n := range l.acked {
					if len(l.seen[id]) < n {
						done = false
					}
				}
				l.mu.Unlock()
				if done {
					time.Sleep(500 * time.Millisecond) // let any over-count show up
				}
				p, ok, err := rt.pop(topic)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					l.record(p)
					continue
				}
				if done {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		settle("counts", counts)
		settle("ticks", ticks)

		for name, l := range map[string]*ledger{"counts": counts, "ticks": ticks} {
			total := 0
			if len(l.dups) > 0 {
				t.Errorf("%s: records delivered twice: %v", name, l.dups)
			}
			for id := 0; id < ids; id++ {
				key := "c" + strconv.Itoa(id)
				acked, unc, seen := l.acked[key], l.uncertain[key], l.seen[key]
				total += acked
				max := 0
				for v := range seen {
					if v > max {
						max = v
					}
				}
				if max < acked || max > acked+unc {
					t.Errorf("%s %s: final value %d, acknowledged %d (+%d uncertain)", name, key, max, acked, unc)
				}
				if len(seen) != max {
					t.Errorf("%s %s: saw %d distinct values up to %d: a count was skipped", name, key, len(seen), max)
				}
			}
			t.Logf("%s: %d acknowledged messages over %d kills", name, total, kills)
		}
	})
}
