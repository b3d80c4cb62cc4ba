package lane

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve starts an HTTP server on a listener of a new lane and returns its
// address. The handler answers the SHA-256 of the request body.
func serve(t *testing.T, opts Options, srv *http.Server) (string, *Listener) {
	t.Helper()
	lane := New(opts)
	if lane == nil {
		t.Skip("no poll(2) on this platform: New returns no lane")
	}
	return serveOn(t, lane, srv)
}

// serveOn is serve on a listener of lane.
func serveOn(t *testing.T, lane *Lane, srv *http.Server) (string, *Listener) {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := lane.Listen(tcp).(*Listener)
	if srv.Handler == nil {
		srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := sha256.New()
			if _, err := io.Copy(h, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
		})
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return tcp.Addr().String(), l
}

// poker calls lane's Poke in a loop, as the runtime's hot paths do, until
// the test ends.
func poker(t *testing.T, lane *Lane) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			lane.Poke()
			runtime.Gosched()
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Requests of every shape are answered exactly while Poke wakes their
// readers: the wake and the deadline it borrows stay invisible to the
// server.
func TestServesRequestsWhilePoked(t *testing.T) {
	addr, l := serve(t, Options{}, &http.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute})
	poker(t, l.lane)
	before := l.lane.Woken()

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for i := range 150 {
				var body []byte
				method := http.MethodGet
				if i%2 == 1 {
					// Up to 256 KiB: a body the server reads in many Reads.
					body = make([]byte, rng.IntN(256<<10))
					for j := range body {
						body[j] = byte(rng.Uint32())
					}
					method = http.MethodPost
				}
				req, err := http.NewRequest(method, "http://"+addr+"/", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					errs <- fmt.Errorf("client %d request %d: %w", c, i, err)
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || string(got) != sum(body) {
					errs <- fmt.Errorf("client %d request %d (%s, %d bytes): status %d, body %q, %v", c, i, method, len(body), resp.StatusCode, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if l.lane.Woken() == before {
		t.Error("Poke woke no reader in 600 requests: the lane did not work")
	}
}

// A slow client is cut off by the server's deadlines even while Poke keeps
// moving its read deadline into the past and back: a wake never loses or
// extends the deadline the server set.
func TestDeadlinesHoldWhilePoked(t *testing.T) {
	addr, l := serve(t, Options{}, &http.Server{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	poker(t, l.lane)

	// Keep the lane busy with a client that asks all along.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		client := &http.Client{Timeout: 5 * time.Second}
		defer client.CloseIdleConnections()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := client.Get("http://" + addr + "/"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()

	closedWithin := func(c net.Conn, max time.Duration) error {
		c.SetReadDeadline(time.Now().Add(max))
		_, err := io.Copy(io.Discard, c)
		if err != nil {
			return fmt.Errorf("the server did not close the connection within %s: %v", max, err)
		}
		return nil
	}

	// A request head that never ends: ReadHeaderTimeout.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET / HTTP/1.1\r\nHost: x\r\n")
	if err := closedWithin(slow, 10*time.Second); err != nil {
		t.Errorf("half a request head: %v", err)
	}

	// A keep-alive connection left idle after one request: IdleTimeout.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if err := closedWithin(idle, 10*time.Second); err != nil {
		t.Errorf("idle keep-alive connection: %v", err)
	}
}

// On a scheduler that always has work (one processor, a goroutine that
// never blocks), Go asks the network poller only from its monitor thread;
// the busy goroutine's Poke is what wakes the lane's readers.
func TestPokeWakesReadersOfABusyProcess(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	addr, l := serve(t, Options{}, &http.Server{ReadHeaderTimeout: 10 * time.Second})
	poker(t, l.lane)
	before := l.lane.Woken()

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	const n = 40
	for i := range n {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if woke := l.lane.Woken() - before; woke < n/2 {
		t.Errorf("Poke woke %d readers for %d requests; want most of them (the network poller woke the rest)", woke, n)
	}
}

// A reader that waits longer than Hot leaves the lane, so an idle
// connection costs no looks; its next request is still served.
func TestIdleReaderLeavesLane(t *testing.T) {
	addr, l := serve(t, Options{Hot: 50 * time.Millisecond}, &http.Server{ReadHeaderTimeout: 10 * time.Second})
	poker(t, l.lane)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	ask := func() {
		t.Helper()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request: %v, %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	ask()
	deadline := time.Now().Add(10 * time.Second)
	for l.readersWaiting() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d readers still in the lane long after Hot", l.readersWaiting())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ask()
}

// A closed Listener is no lane any more; the connections it accepted keep
// working.
func TestClosedListenerLeavesLanes(t *testing.T) {
	addr, l := serve(t, Options{}, &http.Server{ReadHeaderTimeout: 10 * time.Second})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	l.Close()
	l.lane.mu.Lock()
	for _, x := range l.lane.listeners {
		if x == l {
			t.Error("the closed listener is still in its lane")
		}
	}
	l.lane.mu.Unlock()
	if n := l.readersWaiting(); n != 0 {
		t.Errorf("%d readers in a closed lane", n)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request after Close: %v, %v", resp, err)
	}
	if b, _ := io.ReadAll(resp.Body); !strings.HasPrefix(string(b), sum(nil)) {
		t.Errorf("answer after Close: %q", b)
	}
}

// Two lanes in one process are independent: a reader waiting in one is
// not looked at, woken or counted by the other's Poke, and a nil lane is
// no lane.
func TestLanesAreIndependent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a, b := New(Options{}), New(Options{})
	if a == nil {
		t.Skip("no poll(2) on this platform")
	}
	addr, _ := serveOn(t, a, &http.Server{ReadHeaderTimeout: 10 * time.Second})
	poker(t, b) // only the other lane is poked

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 20 {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if a.Woken() != 0 || b.Woken() != 0 {
		t.Errorf("woken: %d by the listener's lane, %d by the other; want none (no one poked the listener's lane)", a.Woken(), b.Woken())
	}
	if b.waiting.Load() != 0 {
		t.Errorf("the other lane counts %d waiting readers of a listener it does not hold", b.waiting.Load())
	}

	var none *Lane
	none.Poke()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	if got := none.Listen(tcp); got != tcp || none.Woken() != 0 {
		t.Errorf("a nil lane: Listen returned %T, Woken %d; want the listener itself and 0", got, none.Woken())
	}
}

// readersWaiting returns how many of l's readers are in the lane.
func (l *Listener) readersWaiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.readers)
}

// BenchmarkPoke measures what the hot paths pay: with no admin reader
// waiting, and with one waiting whose connection has no data (each
// iteration then looks: one poll(2)).
//
//	go test -run '^$' -bench Poke ./internal/lane
func BenchmarkPoke(b *testing.B) {
	b.Run("no-reader", func(b *testing.B) {
		lane := New(Options{})
		for range b.N {
			lane.Poke()
		}
	})
	b.Run("reader-waiting-look", func(b *testing.B) {
		tcp, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lane := New(Options{Hot: time.Hour})
		l := lane.Listen(tcp).(*Listener)
		defer l.Close()
		client, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		c, err := l.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		go c.Read(make([]byte, 1)) // waits in the lane until the end
		for l.readersWaiting() == 0 {
			time.Sleep(time.Millisecond)
		}
		b.ResetTimer()
		for range b.N {
			lane.lastLook.Store(0) // every iteration looks
			lane.Poke()
		}
	})
}
