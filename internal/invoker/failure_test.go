package invoker_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
)

// validReply is a serialized FromFunction with an (empty) invocation result.
func validReply(tb testing.TB) []byte {
	return marshal(tb, &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{
		InvocationResult: &protocol.FromFunction_InvocationResponse{},
	}})
}

// reply returns a handler that answers status with body and Content-Type ct;
// ct "-" sends no Content-Type at all (and stops Go from sniffing one).
func reply(status int, ct string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if ct == "-" {
			w.Header()["Content-Type"] = nil
		} else {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(status)
		w.Write(body)
	}
}

// serve starts handler on a loopback server for the test's lifetime and
// returns its /statefun URL.
func serve(tb testing.TB, handler http.Handler) string {
	tb.Helper()
	srv := httptest.NewServer(handler)
	tb.Cleanup(srv.Close)
	return srv.URL + "/statefun"
}

// TestFailures runs one attempt against misbehaving endpoints and checks the
// Kind, the status code and the log line of each.
func TestFailures(t *testing.T) {
	const smallCap = 1024
	tests := []struct {
		name   string
		opts   invoker.Options
		url    func(t *testing.T) string
		req    func(t *testing.T) *protocol.ToFunction // default: counter with empty state
		kind   invoker.Kind
		status int
		want   []string // fragments of the error text
		is     error    // errors.Is target, if any
	}{{
		name: "connection refused",
		url: func(t *testing.T) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			return "http://" + addr + "/statefun"
		},
		kind: invoker.KindConnect,
		want: []string{"cannot connect: dial tcp", "connection refused"},
	}, {
		name: "Go SDK function error",
		url:  func(t *testing.T) string { return serve(t, sdkHandler(t)) },
		req:  func(t *testing.T) *protocol.ToFunction { return invocation(t, failingType, noState) },
		kind: invoker.KindStatus, status: 500,
		want: []string{`/statefun: function answered 500 Internal Server Error: "failed to invoke example/failing: boom"`},
	}, {
		name: "500 with empty body, as the JS SDK fails",
		url:  func(t *testing.T) string { return serve(t, reply(500, "-", nil)) },
		kind: invoker.KindStatus, status: 500,
		want: []string{"function answered 500 Internal Server Error with an empty body"},
	}, {
		name: "404",
		url:  func(t *testing.T) string { return serve(t, http.NotFoundHandler()) },
		kind: invoker.KindStatus, status: 404,
		want: []string{`function answered 404 Not Found: "404 page not found"`},
	}, {
		name: "redirect is not followed",
		url: func(t *testing.T) string {
			return serve(t, http.RedirectHandler("/elsewhere", http.StatusTemporaryRedirect))
		},
		kind: invoker.KindStatus, status: 307,
		want: []string{"function answered 307 Temporary Redirect to /elsewhere with an empty body"},
	}, {
		name: "long error body is truncated",
		url: func(t *testing.T) string {
			return serve(t, reply(503, "text/plain", bytes.Repeat([]byte("x"), 5000)))
		},
		kind: invoker.KindStatus, status: 503,
		want: []string{`503 Service Unavailable: "` + strings.Repeat("x", 200) + `" (truncated)`},
	}, {
		name: "text/plain content type",
		url:  func(t *testing.T) string { return serve(t, reply(200, "text/plain", validReply(t))) },
		kind: invoker.KindContentType, status: 200,
		want: []string{`function answered Content-Type "text/plain", want application/octet-stream`},
	}, {
		name: "empty 200 body",
		url:  func(t *testing.T) string { return serve(t, reply(200, "application/octet-stream", nil)) },
		kind: invoker.KindEmptyBody, status: 200,
		want: []string{"function answered 200 OK with an empty body"},
	}, {
		name: "body that does not decode",
		url: func(t *testing.T) string {
			return serve(t, reply(200, "application/octet-stream", []byte{0xff, 0xff, 0xff}))
		},
		kind: invoker.KindDecode, status: 200,
		want: []string{"the 3-byte response is not a FromFunction: proto"},
	}, {
		name: "response over the cap, announced",
		opts: invoker.Options{PayloadMaxBytes: smallCap},
		url: func(t *testing.T) string {
			return serve(t, reply(200, "application/octet-stream", make([]byte, 2*smallCap)))
		},
		kind: invoker.KindTooLarge, status: 200,
		want: []string{"response of 2048 bytes exceeds the payload cap of 1024 bytes"},
	}, {
		name: "response over the cap, chunked",
		opts: invoker.Options{PayloadMaxBytes: smallCap},
		url: func(t *testing.T) string {
			return serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				for range 4 {
					w.Write(make([]byte, smallCap/2))
					w.(http.Flusher).Flush() // forces chunking: no Content-Length
				}
			}))
		},
		kind: invoker.KindTooLarge, status: 200,
		want: []string{"response exceeds the payload cap of 1024 bytes"},
	}, {
		name: "gzip response over the cap once decompressed",
		opts: invoker.Options{PayloadMaxBytes: smallCap},
		url: func(t *testing.T) string {
			return serve(t, gzipped(reply(200, "application/octet-stream", make([]byte, 100*smallCap))))
		},
		kind: invoker.KindTooLarge, status: 200,
		want: []string{"response exceeds the payload cap of 1024 bytes"},
	}, {
		name: "corrupt gzip",
		url: func(t *testing.T) string {
			return serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Encoding", "gzip")
				w.Write([]byte("not gzip at all"))
			}))
		},
		kind: invoker.KindDecode, status: 200,
		want: []string{"cannot decompress the gzip response: gzip: invalid header"},
	}, {
		name: "unsolicited deflate",
		url: func(t *testing.T) string {
			return serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Encoding", "deflate")
				w.Write(validReply(t))
			}))
		},
		kind: invoker.KindDecode, status: 200,
		want: []string{`function answered Content-Encoding "deflate", which was not asked for`},
	}, {
		name: "request over the cap is not sent",
		opts: invoker.Options{PayloadMaxBytes: smallCap},
		url: func(t *testing.T) string {
			return serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				t.Error("the oversized request reached the server")
			}))
		},
		req: func(t *testing.T) *protocol.ToFunction {
			req := invocation(t, counterType, seenEntry(t, nil))
			req.GetInvocation().Invocations[0].Argument.Value = make([]byte, 2*smallCap)
			return req
		},
		kind: invoker.KindTooLarge,
		want: []string{"request of 2", "bytes exceeds the payload cap of 1024 bytes"},
	}, {
		name: "slower than the call timeout",
		opts: invoker.Options{CallTimeout: 100 * time.Millisecond},
		url:  func(t *testing.T) string { return serve(t, stall(t)) },
		kind: invoker.KindTimeout,
		want: []string{"no answer within the call timeout of 100ms: context deadline exceeded"},
		is:   context.DeadlineExceeded,
	}, {
		name: "server hangs up without answering",
		url: func(t *testing.T) string {
			return serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				conn.Close()
			}))
		},
		kind: invoker.KindTransport,
		want: []string{"connection failed: EOF"},
	}, {
		name: "unsupported scheme",
		url:  func(t *testing.T) string { return "ftp://localhost/statefun" },
		kind: invoker.KindRequest,
		want: []string{`invoker: POST ftp://localhost/statefun: bad endpoint URL: unsupported scheme "ftp"`},
	}, {
		name: "password is redacted",
		url:  func(t *testing.T) string { return "ftp://user:secret@localhost/statefun" },
		kind: invoker.KindRequest,
		want: []string{"ftp://user:xxxxx@localhost/statefun"},
	}}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.opts)
			url := tt.url(t)
			req := invocation(t, counterType, seenEntry(t, nil))
			if tt.req != nil {
				req = tt.req(t)
			}
			from, err := c.Invoke(context.Background(), url, req)
			if err == nil {
				t.Fatalf("Invoke succeeded with %v, want a %v error", from, tt.kind)
			}
			t.Logf("%v", err)
			var e *invoker.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *invoker.Error", err)
			}
			if e.Kind != tt.kind || invoker.KindOf(err) != tt.kind {
				t.Errorf("kind = %v, want %v", e.Kind, tt.kind)
			}
			if e.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", e.StatusCode, tt.status)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "invoker: POST ") {
				t.Errorf("error %q lacks the invoker: POST prefix", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("error %q shows the password", msg)
			}
		})
	}
}

// TestGoSDKErrorLogLine pins the whole log line for the most common failure.
func TestGoSDKErrorLogLine(t *testing.T) {
	url := serve(t, sdkHandler(t))
	c := newClient(t, invoker.Options{})
	_, err := c.Invoke(context.Background(), url, invocation(t, failingType, noState))
	want := "invoker: POST " + url + `: function answered 500 Internal Server Error: "failed to invoke example/failing: boom"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

// stall returns a handler that answers only when the client goes away or the
// test ends.
func stall(t *testing.T) http.HandlerFunc {
	release := make(chan struct{})
	// Cleanups run last-registered first, so this one, registered after the
	// server's, frees the handler before the server waits for it.
	t.Cleanup(func() { close(release) })
	return func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to its end makes the server watch the connection,
		// so r.Context ends when the client hangs up.
		r.Body.Read(make([]byte, 1<<10))
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

// gzipped compresses h's response when the request allows gzip.
func gzipped(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(rec.Body.Bytes())
		zw.Close()
		maps.Copy(w.Header(), rec.Header())
		w.Header().Del("Content-Length")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(rec.Code)
		w.Write(buf.Bytes())
	}
}

// TestAcceptedResponses checks the responses that must count as successes
// although they differ from what the Go SDK sends.
func TestAcceptedResponses(t *testing.T) {
	countedOne := func(t *testing.T, from *protocol.FromFunction) {
		muts := from.GetInvocationResult().GetStateMutations()
		if len(muts) != 1 || intValue(t, muts[0].GetStateValue()) != 1 {
			t.Errorf("got %v, want seen set to 1", from)
		}
	}
	emptyResult := func(t *testing.T, from *protocol.FromFunction) {
		if !proto.Equal(from, mustDecode(t, validReply(t))) {
			t.Errorf("got %v, want an empty invocation result", from)
		}
	}
	tests := []struct {
		name    string
		handler func(t *testing.T) http.Handler
		check   func(t *testing.T, from *protocol.FromFunction)
	}{
		{"Go SDK as is", func(t *testing.T) http.Handler { return sdkHandler(t) }, countedOne},
		{"gzip-compressed", func(t *testing.T) http.Handler { return gzipped(sdkHandler(t)) }, countedOne},
		{"no Content-Type", func(t *testing.T) http.Handler {
			return reply(200, "-", validReply(t))
		}, emptyResult},
		{"Content-Type with charset", func(t *testing.T) http.Handler {
			return reply(200, "application/octet-stream; charset=utf-8", validReply(t))
		}, emptyResult},
		{"Content-Type in capitals", func(t *testing.T) http.Handler {
			return reply(200, "Application/Octet-Stream", validReply(t))
		}, emptyResult},
		{"Content-Type list", func(t *testing.T) http.Handler {
			return reply(200, "text/plain, application/octet-stream", validReply(t))
		}, emptyResult},
		{"202 Accepted", func(t *testing.T) http.Handler {
			return reply(202, "application/octet-stream", validReply(t))
		}, emptyResult},
		{"neither response set", func(t *testing.T) http.Handler {
			// Field 1, varint 1: unknown to FromFunction, so it decodes with
			// neither oneof case set.
			return reply(200, "application/octet-stream", []byte{0x08, 0x01})
		}, func(t *testing.T, from *protocol.FromFunction) {
			if from.GetResponse() != nil {
				t.Errorf("got %v, want no response set", from)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := serve(t, tt.handler(t))
			c := newClient(t, invoker.Options{})
			from, err := c.Invoke(context.Background(), url, invocation(t, counterType, seenEntry(t, nil)))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, from)
		})
	}
}

func mustDecode(t *testing.T, b []byte) *protocol.FromFunction {
	var from protocol.FromFunction
	if err := proto.Unmarshal(b, &from); err != nil {
		t.Fatal(err)
	}
	return &from
}

// TestCanceled checks that the caller's context ends an attempt, and that
// the error tells that apart from the invoker's own timeout.
func TestCanceled(t *testing.T) {
	var started atomic.Int32
	startedCh := make(chan struct{}, 1)
	h := stall(t)
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case startedCh <- struct{}{}:
		default:
		}
		h(w, r)
	}))
	c := newClient(t, invoker.Options{})

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-startedCh
			cancel()
		}()
		_, err := c.Invoke(ctx, url, invocation(t, counterType, seenEntry(t, nil)))
		if invoker.KindOf(err) != invoker.KindCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want KindCanceled wrapping context.Canceled", err)
		}
		if !strings.Contains(err.Error(), "abandoned by the caller: context canceled") {
			t.Errorf("error %q", err)
		}
	})

	t.Run("caller deadline before call timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Invoke(ctx, url, invocation(t, counterType, seenEntry(t, nil)))
		if invoker.KindOf(err) != invoker.KindCanceled || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want KindCanceled wrapping context.DeadlineExceeded", err)
		}
	})

	t.Run("already canceled", func(t *testing.T) {
		before := started.Load()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.Invoke(ctx, url, invocation(t, counterType, seenEntry(t, nil)))
		if invoker.KindOf(err) != invoker.KindCanceled {
			t.Fatalf("error %v, want KindCanceled", err)
		}
		if started.Load() != before {
			t.Error("a request with a canceled context reached the server")
		}
	})
}
