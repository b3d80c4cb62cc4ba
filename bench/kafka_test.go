package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
	"github.com/statefun-go/statefun/internal/store"
)

// The settings of the Kafka benchmark (see the package comment).
var (
	flagKafkaRecords    = flag.Int("kafka.records", envInt("STATEFUN_BENCH_KAFKA_RECORDS", 100_000), "records produced to the input topic per Kafka run")
	flagKafkaKeys       = flag.Int("kafka.keys", envInt("STATEFUN_BENCH_KAFKA_KEYS", 10_000), "distinct record keys (counter ids) of a Kafka run")
	flagKafkaWindow     = flag.Int("kafka.window", envInt("STATEFUN_BENCH_KAFKA_WINDOW", 1_000), "records produced but not yet visible on the output topic, at most (closed loop)")
	flagKafkaPartitions = flag.Int("kafka.partitions", envInt("STATEFUN_BENCH_KAFKA_PARTITIONS", 8), "partitions of the input and the output topic")
	flagKafkaBrokers    = flag.Int("kafka.brokers", envInt("STATEFUN_BENCH_KAFKA_BROKERS", 1), "brokers of the kfake cluster")
	flagKafkaMaxTime    = flag.Duration("kafka.maxtime", envDur("STATEFUN_BENCH_KAFKA_MAXTIME", 2*time.Minute), "bound on one Kafka run")
)

// The names of the Kafka benchmark's module.
const (
	kafkaInTopic   = "bench-in"
	kafkaOutTopic  = "bench-out"
	kafkaCounterFn = "bench/counter"
	// kafkaRouterFn forwards each message to bench/counter, same id and
	// value: the first hop of BenchmarkClusterLatency's chain.
	kafkaRouterFn  = "bench/router"
	kafkaEgressID  = "bench/out"
	kafkaCountName = "count"
	kafkaWarmupKey = "warmup"
	// kafkaStampType is the input's typename (the ingress's valueType).
	kafkaStampType = "bench/stamp"
)

// kafkaEnv carries the kfake cluster's settings, as JSON, to the kafka
// child; kafkaLoadEnv a kafkaLoadSpec to the kload child.
const (
	kafkaEnv     = "STATEFUN_BENCH_KAFKA"
	kafkaLoadEnv = "STATEFUN_BENCH_KAFKA_LOAD"
)

// kafkaCount is the Kafka counter's only state.
var kafkaCount = statefun.ValueSpec{Name: kafkaCountName, ValueType: statefun.Int64Type}

// kafkaCounterHandler serves bench/counter with the official Go SDK: each
// message adds 1 to the id's count and sends "<count> <message value>" to
// the Kafka egress bench/out, topic bench-out, keyed by the id. The value
// is the producer's timestamp, so the consumer of the output can tell the
// end-to-end latency.
func kafkaCounterHandler() http.Handler {
	fns := statefun.StatefulFunctionsBuilder()
	err := fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(kafkaCounterFn),
		States:       []statefun.ValueSpec{kafkaCount},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int64
			ctx.Storage().Get(kafkaCount, &n)
			n++
			ctx.Storage().Set(kafkaCount, n)
			ctx.SendEgress(statefun.KafkaEgressBuilder{
				Target: statefun.TypeNameFrom(kafkaEgressID),
				Topic:  kafkaOutTopic,
				Key:    ctx.Self().Id,
				Value:  []byte(strconv.FormatInt(n, 10) + " " + string(msg.RawValue())),
			})
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	err = fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(kafkaRouterFn),
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			ctx.Send(statefun.MessageBuilder{
				Target:    statefun.Address{FunctionType: statefun.TypeNameFrom(kafkaCounterFn), Id: ctx.Self().Id},
				Value:     msg.RawValue(),
				ValueType: stampType{},
			})
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	return fns.AsHandler()
}

// stampType is bench/stamp as the SDK's SimpleType: the value's bytes as
// they are.
type stampType struct{}

func (stampType) GetTypeName() statefun.TypeName { return statefun.TypeNameFrom(kafkaStampType) }

func (stampType) Deserialize(r io.Reader, receiver interface{}) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	*(receiver.(*[]byte)) = b
	return nil
}

func (stampType) Serialize(w io.Writer, data interface{}) error {
	_, err := w.Write(data.([]byte))
	return err
}

// kafkaCluster is what the kafka child serves.
type kafkaCluster struct {
	Brokers    int
	Partitions int
}

// serveKafka is the kafka child: a kfake cluster on loopback with the
// input and output topics. It prints "listening on <brokers>" and exits
// when stdin is closed.
func serveKafka() error {
	var spec kafkaCluster
	if err := json.Unmarshal([]byte(os.Getenv(kafkaEnv)), &spec); err != nil {
		return err
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(spec.Brokers),
		kfake.SeedTopics(int32(spec.Partitions), kafkaInTopic, kafkaOutTopic))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("listening on %s\n", strings.Join(c.ListenAddrs(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// kafkaLoadSpec is the work of the Kafka load generator: produce Records
// records keyed "id-<i mod Keys>" to the input topic, never more than
// Window of them not yet seen on the output topic, and read the output
// read_committed.
type kafkaLoadSpec struct {
	Brokers []string
	Records int
	Keys    int
	Window  int
	MaxTime time.Duration
	// Ingress, when set, sends the records through these playground
	// ingresses instead of producing them to the input topic: a POST of
	// the record's value to <ingress><key>, the ingresses taken in turn
	// (the cluster benchmarks' input).
	Ingress []string
}

// kafkaLoadResult is what a Kafka load generator measured.
type kafkaLoadResult struct {
	Produced, Visible   int
	Elapsed             time.Duration // first produce to the last record visible
	P50, P90, P99, PMax time.Duration // produce to visible on the output
	// Duplicates and Wrong count output records whose count was seen
	// before for their key, or is not one of 1..(records of the key);
	// Extra counts output records that arrived after all were in.
	Duplicates, Wrong, Extra int
}

func (r kafkaLoadResult) rate() float64 { return float64(r.Visible) / r.Elapsed.Seconds() }

// runKafkaLoadChild is the kload child: it warms up (one record, waits for
// its output), prints "ready", starts on a line on stdin, prints "result
// <kafkaLoadResult as JSON>" and exits when stdin closes.
func runKafkaLoadChild() error {
	var spec kafkaLoadSpec
	if err := json.Unmarshal([]byte(os.Getenv(kafkaLoadEnv)), &spec); err != nil {
		return err
	}
	l, err := newKafkaLoad(spec)
	if err != nil {
		return err
	}
	defer l.close()
	if err := l.warmup(context.Background()); err != nil {
		return err
	}
	fmt.Println("ready")
	stdin := bufio.NewReader(os.Stdin)
	if _, err := stdin.ReadString('\n'); err != nil {
		return err
	}
	res, err := l.run(context.Background())
	if err != nil {
		return err
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", out)
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// kafkaLoad is a producer of the input topic and a read_committed consumer
// of the output topic.
type kafkaLoad struct {
	spec      kafkaLoadSpec
	prod, con *kgo.Client
	web       *http.Client  // the ingresses' client, with Ingress
	posts     chan struct{} // a slot per POST in flight
}

func newKafkaLoad(spec kafkaLoadSpec) (*kafkaLoad, error) {
	// The producer is a plain idempotent one with franz-go's defaults
	// (acks=all, 10 ms linger), as an application's would be.
	prod, err := kgo.NewClient(kgo.SeedBrokers(spec.Brokers...), kgo.DefaultProduceTopic(kafkaInTopic))
	if err != nil {
		return nil, err
	}
	con, err := kgo.NewClient(kgo.SeedBrokers(spec.Brokers...), kgo.ConsumeTopics(kafkaOutTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		prod.Close()
		return nil, err
	}
	l := &kafkaLoad{spec: spec, prod: prod, con: con}
	if len(spec.Ingress) > 0 {
		l.web = newLoadClient(ingressPosts)
		l.posts = make(chan struct{}, ingressPosts)
	}
	return l, nil
}

func (l *kafkaLoad) close() {
	l.prod.Close()
	l.con.Close()
	if l.web != nil {
		l.web.CloseIdleConnections()
	}
}

// ingressPosts bounds the POSTs in flight to the playground ingresses.
const ingressPosts = 64

// send hands record i (key, value) to the input — the topic, or the
// ingresses in turn — and calls done with the outcome once it is durable
// there.
func (l *kafkaLoad) send(ctx context.Context, i int, key string, value []byte, done func(error)) {
	if l.web == nil {
		l.prod.Produce(ctx, &kgo.Record{Key: []byte(key), Value: value}, func(_ *kgo.Record, err error) { done(err) })
		return
	}
	select {
	case l.posts <- struct{}{}:
	case <-ctx.Done():
		done(ctx.Err())
		return
	}
	go func() {
		defer func() { <-l.posts }()
		u := l.spec.Ingress[i%len(l.spec.Ingress)] + key
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(value))
		if err != nil {
			done(err)
			return
		}
		req.Header.Set("Content-Type", kafkaStampType)
		resp, err := l.web.Do(req)
		if err != nil {
			done(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done(fmt.Errorf("POST %s: %s: %s", u, resp.Status, body))
			return
		}
		done(nil)
	}()
}

// sendSync is send, waiting for the outcome.
func (l *kafkaLoad) sendSync(ctx context.Context, key string, value []byte) error {
	errc := make(chan error, 1)
	l.send(ctx, 0, key, value, func(err error) { errc <- err })
	return <-errc
}

// stamp is a record value: the time it is produced, in Unix nanoseconds.
func stamp() []byte { return strconv.AppendInt(nil, time.Now().UnixNano(), 10) }

// warmup sends one record and waits until its count is visible: the
// function's state is registered, the egress's transactions run.
func (l *kafkaLoad) warmup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.sendSync(ctx, kafkaWarmupKey, stamp()); err != nil {
		return fmt.Errorf("bench: warm-up record: %w", err)
	}
	for {
		fs := l.con.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: warm-up output: %w", err)
		}
		found := false
		fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Key) == kafkaWarmupKey })
		if found {
			return nil
		}
	}
}

// run produces the records and reads their outputs until all are visible.
func (l *kafkaLoad) run(ctx context.Context) (kafkaLoadResult, error) {
	ctx, cancel := context.WithTimeout(ctx, l.spec.MaxTime)
	defer cancel()
	var (
		window   = make(chan struct{}, l.spec.Window)
		prodErr  atomic.Pointer[error]
		produced atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	wg.Add(1)
	go pprof.Do(ctx, pprof.Labels("role", "loadgen"), func(ctx context.Context) {
		defer wg.Done()
		for i := range l.spec.Records {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			l.send(ctx, i, idName(i%l.spec.Keys), stamp(), func(err error) {
				if err != nil {
					prodErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				produced.Add(1)
			})
		}
	})

	var res kafkaLoadResult
	lats := make([]time.Duration, 0, l.spec.Records)
	seen := map[string][]bool{} // key → counts seen (index count-1)
	perKey := func(k string) int {
		i, err := strconv.Atoi(strings.TrimPrefix(k, "id-"))
		if err != nil {
			return 0
		}
		n := l.spec.Records / l.spec.Keys
		if i < l.spec.Records%l.spec.Keys {
			n++
		}
		return n
	}
	var bad error
	consume := func(r *kgo.Record) {
		now := time.Now().UnixNano()
		key := string(r.Key)
		if key == kafkaWarmupKey {
			return
		}
		cnt, ts, ok := strings.Cut(string(r.Value), " ")
		n, err1 := strconv.Atoi(cnt)
		t, err2 := strconv.ParseInt(ts, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			bad = fmt.Errorf("bench: output record %q: not \"<count> <stamp>\"", r.Value)
			return
		}
		s := seen[key]
		if s == nil {
			s = make([]bool, perKey(key))
			seen[key] = s
		}
		switch {
		case n < 1 || n > len(s):
			res.Wrong++
		case s[n-1]:
			res.Duplicates++
		default:
			s[n-1] = true
			res.Visible++
			lats = append(lats, time.Duration(now-t))
			select {
			case <-window:
			default:
			}
		}
	}
	for res.Visible < l.spec.Records && bad == nil {
		fs := l.con.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(consume)
	}
	res.Elapsed = time.Since(start)
	cancel()
	wg.Wait()
	res.Produced = int(produced.Load())
	if p := prodErr.Load(); p != nil {
		return res, fmt.Errorf("bench: producing: %w", *p)
	}
	if bad != nil {
		return res, bad
	}
	if res.Visible < l.spec.Records {
		return res, fmt.Errorf("bench: %d of %d records visible on the output after %v", res.Visible, l.spec.Records, l.spec.MaxTime)
	}
	// Anything more on the output within a second is a duplicate.
	tctx, tcancel := context.WithTimeout(context.Background(), time.Second)
	defer tcancel()
	for tctx.Err() == nil {
		l.con.PollFetches(tctx).EachRecord(func(r *kgo.Record) { res.Extra++ })
	}
	slices.Sort(lats)
	q := func(p float64) time.Duration { return loadResult{lat: lats}.quantile(p) }
	res.P50, res.P90, res.P99, res.PMax = q(0.5), q(0.9), q(0.99), q(1)
	return res, nil
}

// BenchmarkKafkaCounter runs the runtime (in this process, through
// internal/app, on a fresh synced store) with a Kafka ingress of topic
// bench-in to the official-SDK counter bench/counter (a child process) and
// an exactly-once Kafka egress of its counts to topic bench-out, against a
// kfake cluster in another child process. A load generator (a third child)
// produces -kafka.records records over -kafka.keys keys, with at most
// -kafka.window of them not yet visible to its read_committed consumer of
// bench-out. records/s is records visible on the output over the time from
// the first produce to the last visible record; p50/p99 are from each
// record's produce to its count being visible.
func BenchmarkKafkaCounter(b *testing.B) {
	fnAddr, fnPID := startServer(b, "kcounter")
	var r *kafkaRunResult
	for range b.N {
		r = runKafka(b, "http://"+fnAddr+"/statefun", fnPID)
	}
	r.report(b)
}

// kafkaRunResult is one measured Kafka run.
type kafkaRunResult struct {
	load                            kafkaLoadResult
	rtPID, fnPID, kafkaPID, loadPID int           // rtPID 0: this process
	cpuSelf, cpuRuntime             time.Duration // the same process unless -load.bin
	cpuFn, cpuKafka, cpuGen         time.Duration
	cpuOK                           bool
	machine                         machineCPU
	before, after                   metrics
	goBefore, goAfter               goRuntime
	probe                           float64
	profile                         string
}

func runKafka(b *testing.B, fnURL string, fnPID int) *kafkaRunResult {
	b.StopTimer()
	ctx := b.Context()
	js, err := json.Marshal(kafkaCluster{Brokers: *flagKafkaBrokers, Partitions: *flagKafkaPartitions})
	if err != nil {
		b.Fatal(err)
	}
	kc := startChild(b, "kafka", kafkaEnv+"="+string(js))
	brokers := kc.expect(b, "listening on ", time.Minute)

	dir := b.TempDir()
	module := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: bench/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
`, fnURL) + kafkaIngressTo(brokers, kafkaCounterFn) + fmt.Sprintf(`---
kind: io.statefun.kafka.v1/egress
spec:
  id: %s
  address: %s
  deliverySemantic:
    type: exactly-once
    transactionTimeout: 1min
`, kafkaEgressID, brokers)
	rt, err := startRuntimeProc(b, dir, module)
	if err != nil {
		b.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.close()
		}
	}()
	mc := &http.Client{Timeout: 10 * time.Second}
	admin := "http://" + rt.admin
	if err := waitReadyz(ctx, mc, admin+"/readyz", time.Minute); err != nil {
		b.Fatal(err)
	}

	spec := kafkaLoadSpec{Brokers: strings.Split(brokers, ","), Records: *flagKafkaRecords, Keys: *flagKafkaKeys,
		Window: *flagKafkaWindow, MaxTime: *flagKafkaMaxTime}
	if spec.Keys <= 0 || spec.Records <= 0 || spec.Window <= 0 {
		b.Fatalf("bench: -kafka.records, -kafka.keys and -kafka.window must be positive")
	}
	ljs, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	gen := startChild(b, "kload", kafkaLoadEnv+"="+string(ljs))
	gen.expect(b, "ready", 2*time.Minute)

	// The warm-up's commits settle before the clock starts.
	before, err := waitFor(ctx, mc, admin+"/metrics", 30*time.Second, func(m metrics) bool {
		return m.sum("statefun_kafka_egress_records_total") >= 1 && m.sum("statefun_queue_depth") == 0
	})
	if err != nil {
		b.Fatal(err)
	}
	r := &kafkaRunResult{rtPID: rt.pid, fnPID: fnPID, kafkaPID: kc.pid, loadPID: gen.pid, before: before}
	if *flagGOGC != 0 && rt.pid == 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(*flagGOGC))
	}
	r.probe = cpuProbe()
	if *flagProfile != "" {
		if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
			b.Fatal(err)
		}
		r.profile = filepath.Join(*flagProfile, "cpu-kafka.pprof")
		f, err := os.Create(r.profile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Logf("bench: no CPU profile (%v); is -cpuprofile set?", err)
			r.profile = ""
		}
	}
	cpu0, ok0 := cpuOf(os.Getpid(), rt.pid, fnPID, kc.pid, gen.pid)
	mach0 := readMachineCPU()
	r.goBefore = readGoRuntime()
	b.StartTimer()

	if _, err := io.WriteString(gen.stdin, "go\n"); err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal([]byte(gen.expect(b, "result ", *flagKafkaMaxTime+time.Minute)), &r.load); err != nil {
		b.Fatal(err)
	}

	b.StopTimer()
	r.machine = readMachineCPU().minus(mach0)
	r.goAfter = readGoRuntime()
	cpu1, ok1 := cpuOf(os.Getpid(), rt.pid, fnPID, kc.pid, gen.pid)
	r.cpuSelf, r.cpuRuntime, r.cpuFn, r.cpuKafka, r.cpuGen = cpu1[0]-cpu0[0], cpu1[1]-cpu0[1], cpu1[2]-cpu0[2], cpu1[3]-cpu0[3], cpu1[4]-cpu0[4]
	if rt.pid == 0 {
		r.cpuRuntime = r.cpuSelf
	}
	r.cpuOK = ok0 && ok1
	if r.profile != "" {
		pprof.StopCPUProfile()
	}
	r.after, err = scrape(ctx, mc, admin+"/metrics")
	if err != nil {
		b.Fatal(err)
	}
	if l := r.load; l.Duplicates+l.Wrong+l.Extra > 0 {
		b.Errorf("bench: the output topic held %d duplicate, %d wrong and %d extra records; want none", l.Duplicates, l.Wrong, l.Extra)
	}
	if err := rt.close(); err != nil {
		b.Fatal(err)
	}
	closed = true
	if rt.ownFormat {
		verifyKafka(b, rt.dataDir, spec.Keys, spec.Records+1)
	}
	return r
}

// waitReadyz polls url until it answers 200.
func waitReadyz(ctx context.Context, client *http.Client, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s not ready within %v: %v", url, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verifyKafka reopens the store of a finished Kafka run and checks that the
// counts of all keys (warm-up included) add up to want.
func verifyKafka(b *testing.B, dataDir string, keys, want int) {
	db, err := store.Open(dataDir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	counter, err := address.ParseTypeName(kafkaCounterFn)
	if err != nil {
		b.Fatal(err)
	}
	total := int64(0)
	for i := -1; i < keys; i++ {
		id := kafkaWarmupKey
		if i >= 0 {
			id = idName(i)
		}
		e, ok, err := db.GetState(address.Address{Type: counter, ID: id}, kafkaCountName)
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			continue
		}
		n, err := sdktest.DecodeInt64(&protocol.TypedValue{Typename: e.Typename, HasValue: true, Value: e.Value})
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	if total != int64(want) {
		b.Errorf("bench: after the run the counts sum to %d; want %d", total, want)
	}
}

func (r *kafkaRunResult) report(b *testing.B) {
	l := r.load
	wall := l.Elapsed.Seconds()
	perRec := func(d time.Duration) float64 { return 1e6 * d.Seconds() / float64(l.Visible) }
	b.ReportMetric(l.rate(), "records/s")
	b.ReportMetric(ms(l.P50), "p50-ms")
	b.ReportMetric(ms(l.P99), "p99-ms")
	if r.cpuOK {
		b.ReportMetric(perRec(r.cpuRuntime), "runtime-cpu-us/record")
	}
	d := func(name string) float64 { return r.after.sum(name) - r.before.sum(name) }
	h := func(name string) histogram { return r.after.histogram(name).minus(r.before.histogram(name)) }
	commits, calls, batch := h("statefun_commit_seconds"), h("statefun_call_seconds"), h("statefun_batch_size")
	txns := d("statefun_kafka_egress_transactions_total")

	b.Logf("%d records over %d keys, window %d, %d partitions per topic, %d kfake brokers (child process), function in a child process",
		l.Visible, *flagKafkaKeys, *flagKafkaWindow, *flagKafkaPartitions, *flagKafkaBrokers)
	if r.rtPID != 0 {
		b.Logf("runtime: %s in a child process; its store is not reopened to check the counts (its format may not be this tree's)", *flagBin)
	}
	b.Logf("output (read_committed): %.0f records/s in %.2fs; produce to visible p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms",
		l.rate(), wall, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.PMax))
	b.Logf("group commits: %.0f (%.0f/s), p50 %.2f ms, p99 %.2f ms; %.1f records per commit",
		commits.count, commits.count/wall, 1e3*commits.quantile(0.5), 1e3*commits.quantile(0.99), float64(l.Visible)/commits.count)
	b.Logf("function calls: %.0f (%.0f/s), p50 %.2f ms, p99 %.2f ms; %.2f messages per call",
		calls.count, calls.count/wall, 1e3*calls.quantile(0.5), 1e3*calls.quantile(0.99), batch.mean())
	b.Logf("kafka: %.0f ingress records, %.0f egress records in %.0f transactions (%.1f records per transaction), %.0f ingress busy refusals",
		d("statefun_kafka_ingress_records_total"), d("statefun_kafka_egress_records_total"), txns,
		d("statefun_kafka_egress_records_total")/txns, d("statefun_kafka_ingress_busy_total"))
	if r.cpuOK {
		b.Logf("cpu per record: runtime %.0f µs (%.2f cores), function %.0f µs (%.2f cores), kfake %.0f µs (%.2f cores), producer+consumer %.0f µs (%.2f cores)",
			perRec(r.cpuRuntime), r.cpuRuntime.Seconds()/wall, perRec(r.cpuFn), r.cpuFn.Seconds()/wall,
			perRec(r.cpuKafka), r.cpuKafka.Seconds()/wall, perRec(r.cpuGen), r.cpuGen.Seconds()/wall)
	}
	if g0, g1 := r.goBefore, r.goAfter; r.rtPID == 0 { // the runtime's Go runtime only when it runs here
		b.Logf("go runtime of this process: %d GC cycles, GC %.2f cores, live heap %.1f MiB",
			g1.gcCycles-g0.gcCycles, (g1.gcCPU-g0.gcCPU)/wall, float64(g1.liveHeap)/(1<<20))
	}
	if m := r.machine; m.ok {
		b.Logf("machine: %.2f cores busy (of which irq+softirq %.2f), %.2f idle, %.2f iowait, %.2f steal; cpu probe %.0f MB/s sha256",
			m.busy/wall, m.irq/wall, m.idle/wall, m.iowait/wall, m.steal/wall, r.probe)
		ours := []time.Duration{r.cpuSelf, r.cpuFn, r.cpuKafka, r.cpuGen}
		if r.rtPID != 0 {
			ours = append(ours, r.cpuRuntime)
		}
		if other := m.others(wall, ours...); r.cpuOK && other > 0.1 {
			b.Logf("WARNING: other processes took %.2f cores during the run; these figures are not clean", other)
		}
	}
	if r.profile != "" {
		b.Logf("cpu profile: go tool pprof -top %s", r.profile)
	}
}
