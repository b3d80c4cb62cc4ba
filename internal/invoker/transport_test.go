package invoker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
)

// seen is what a recording server saw of one request.
type seen struct {
	method, proto, host, target string
	header                      http.Header
	contentLength               int64
	transferEncoding            []string
	body                        []byte
}

// recorder serves validReply and keeps what it saw of the last request.
type recorder struct {
	mu   sync.Mutex
	last seen
	next http.Handler // answers the request; validReply when nil
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.last = seen{r.Method, r.Proto, r.Host, r.RequestURI, r.Header.Clone(), r.ContentLength, r.TransferEncoding, body}
	rec.mu.Unlock()
	if rec.next == nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(validReplyBytes)
		return
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	rec.next.ServeHTTP(w, r)
}

func (rec *recorder) seen() seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.last
}

var validReplyBytes, _ = proto.Marshal(&protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{
	InvocationResult: &protocol.FromFunction_InvocationResponse{},
}})

// TestRequestOnTheWire checks the request line, headers and body against
// what StateFun's async client sends and what the SDKs require.
func TestRequestOnTheWire(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	c := newClient(t, invoker.Options{})
	req := invocation(t, counterType, seenEntry(t, nil))

	tests := []struct{ url, target string }{
		{srv.URL + "/statefun", "/statefun"},
		{srv.URL + "/fns/greeter?x=1&y=%20#fragment", "/fns/greeter?x=1&y=%20"},
		{srv.URL, "/"},
	}
	for _, tt := range tests {
		if _, err := c.Invoke(context.Background(), tt.url, req); err != nil {
			t.Fatal(err)
		}
		got := rec.seen()
		if got.target != tt.target {
			t.Errorf("%s: request target %q, want %q", tt.url, got.target, tt.target)
		}
		if got.method != "POST" || got.proto != "HTTP/1.1" {
			t.Errorf("request line %s %s, want POST HTTP/1.1", got.method, got.proto)
		}
		for name, want := range map[string]string{
			"Content-Type":    "application/octet-stream",
			"Accept":          "application/octet-stream",
			"User-Agent":      "statefun",
			"Accept-Encoding": "gzip",
		} {
			if v := got.header.Values(name); len(v) != 1 || v[0] != want {
				t.Errorf("header %s = %q, want %q", name, v, want)
			}
		}
		// The Go SDK refuses a request without a Content-Length.
		if got.contentLength != int64(len(got.body)) || got.contentLength == 0 || got.transferEncoding != nil {
			t.Errorf("Content-Length %d, Transfer-Encoding %q for a %d-byte body; want a plain length",
				got.contentLength, got.transferEncoding, len(got.body))
		}
		var sent protocol.ToFunction
		if err := proto.Unmarshal(got.body, &sent); err != nil || !proto.Equal(&sent, req) {
			t.Errorf("body decodes to %v, %v; want %v", &sent, err, req)
		}
	}
}

// connCounter is an httptest server that counts the connections it
// accepts.
type connCounter struct {
	*httptest.Server
	conns atomic.Int32
}

func newConnCounter(t *testing.T, h http.Handler) *connCounter {
	cc := &connCounter{Server: httptest.NewUnstartedServer(h)}
	cc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			cc.conns.Add(1)
		}
	}
	cc.Start()
	t.Cleanup(cc.Close)
	return cc
}

// callN makes n calls from each of g goroutines and fails t on any error.
func callN(t *testing.T, c *invoker.Client, url string, g, n int) {
	t.Helper()
	req := invocation(t, counterType, seenEntry(t, nil))
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for range n {
				if _, err := c.Invoke(context.Background(), url, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestConnectionReuse checks keep-alive pooling: calls reuse connections,
// concurrency opens at most one connection per call in flight, PoolSize
// caps them, and Close drops the idle ones.
func TestConnectionReuse(t *testing.T) {
	t.Run("sequential calls share one connection", func(t *testing.T) {
		srv := newConnCounter(t, sdkHandler(t))
		callN(t, newClient(t, invoker.Options{}), srv.URL+"/statefun", 1, 50)
		if n := srv.conns.Load(); n != 1 {
			t.Errorf("%d connections for 50 sequential calls, want 1", n)
		}
	})

	t.Run("concurrent calls reuse connections", func(t *testing.T) {
		const workers, calls = 8, 25
		srv := newConnCounter(t, sdkHandler(t))
		callN(t, newClient(t, invoker.Options{}), srv.URL+"/statefun", workers, calls)
		// The default MaxIdleConnsPerHost of 2 would redial most of the 200
		// calls. A pool needs about one connection per worker; Go's
		// transport can dial a few more, because a call waiting for its own
		// dial takes any connection freed meanwhile, and the dial's result
		// then joins the pool.
		if n := srv.conns.Load(); n > 2*workers {
			t.Errorf("%d connections for %d workers making %d calls, want at most %d", n, workers, workers*calls, 2*workers)
		}
	})

	t.Run("PoolSize caps connections", func(t *testing.T) {
		sdk := sdkHandler(t)
		srv := newConnCounter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(10 * time.Millisecond) // keep calls overlapping
			sdk.ServeHTTP(w, r)
		}))
		callN(t, newClient(t, invoker.Options{PoolSize: 2}), srv.URL+"/statefun", 8, 3)
		if n := srv.conns.Load(); n > 2 {
			t.Errorf("%d connections with PoolSize 2", n)
		}
	})

	t.Run("Close drops idle connections", func(t *testing.T) {
		srv := newConnCounter(t, sdkHandler(t))
		c := newClient(t, invoker.Options{})
		callN(t, c, srv.URL+"/statefun", 1, 1)
		c.Close()
		callN(t, c, srv.URL+"/statefun", 1, 1)
		if n := srv.conns.Load(); n != 2 {
			t.Errorf("%d connections, want 2: a fresh one after Close", n)
		}
	})
}

// testPKI is a CA with a server certificate for localhost and 127.0.0.1 and
// a client certificate, written as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	server                    tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	writePEM := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "invoker test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	serverDER, serverKey := leaf(2, "localhost", x509.ExtKeyUsageServerAuth)
	clientDER, clientKey := leaf(3, "statefun", x509.ExtKeyUsageClientAuth)
	clientKeyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	pki := &testPKI{
		caFile:   writePEM("ca.pem", "CERTIFICATE", caDER),
		certFile: writePEM("client.pem", "CERTIFICATE", clientDER),
		keyFile:  writePEM("client-key.pem", "PRIVATE KEY", clientKeyDER),
		pool:     x509.NewCertPool(),
		server:   tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey},
	}
	pki.pool.AddCert(ca)
	return pki
}

// serverConfig requires and verifies a client certificate (mutual TLS).
func (p *testPKI) serverConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.pool,
	}
}

var quietLog = log.New(io.Discard, "", 0)

// TestMutualTLS calls the SDK through an https server that requires a
// client certificate.
func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	srv := httptest.NewUnstartedServer(sdkHandler(t))
	srv.TLS = pki.serverConfig()
	srv.Config.ErrorLog = quietLog // the refused handshakes below are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL + "/statefun"
	req := invocation(t, counterType, seenEntry(t, nil))

	t.Run("trusted CA and client certificate", func(t *testing.T) {
		c := newClient(t, invoker.Options{TrustCACerts: pki.caFile, ClientCert: pki.certFile, ClientKey: pki.keyFile})
		from, err := c.Invoke(context.Background(), url, req)
		if err != nil {
			t.Fatal(err)
		}
		if from.GetInvocationResult() == nil {
			t.Errorf("got %v, want an invocation result", from)
		}
	})

	t.Run("server CA not trusted", func(t *testing.T) {
		c := newClient(t, invoker.Options{ClientCert: pki.certFile, ClientKey: pki.keyFile})
		_, err := c.Invoke(context.Background(), url, req)
		if invoker.KindOf(err) != invoker.KindConnect || !strings.Contains(err.Error(), "cannot connect: tls: failed to verify certificate") {
			t.Errorf("error %v, want KindConnect failing verification", err)
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		c := newClient(t, invoker.Options{TrustCACerts: pki.caFile})
		_, err := c.Invoke(context.Background(), url, req)
		// In TLS 1.3 the client finishes its handshake before the server
		// checks the client certificate, so the refusal arrives as an alert
		// on the first read: a broken connection, not a failed connect.
		if invoker.KindOf(err) != invoker.KindTransport || !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("error %v, want KindTransport with the certificate required alert", err)
		}
	})
}

// TestUnixSocket calls the SDK through servers on UNIX sockets, plain and
// with TLS.
func TestUnixSocket(t *testing.T) {
	pki := newTestPKI(t)
	// Socket paths are limited to about 100 bytes, which t.TempDir can
	// exceed under long test names.
	dir, err := os.MkdirTemp("", "invoker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	serveUnix := func(t *testing.T, name string, tlsCfg *tls.Config) (*recorder, string) {
		sock := filepath.Join(dir, name)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{next: sdkHandler(t)}
		srv := httptest.NewUnstartedServer(rec)
		srv.Listener.Close()
		srv.Listener = ln
		if tlsCfg != nil {
			srv.TLS = tlsCfg
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		return rec, sock
	}
	check := func(t *testing.T, c *invoker.Client, url string, rec *recorder) {
		t.Helper()
		from, err := c.Invoke(context.Background(), url, invocation(t, counterType, seenEntry(t, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if from.GetInvocationResult() == nil {
			t.Errorf("got %v, want an invocation result", from)
		}
		if got := rec.seen(); got.target != "/statefun?x=1" || got.host != "localhost" {
			t.Errorf("server saw Host %q and target %q, want localhost and /statefun?x=1", got.host, got.target)
		}
	}

	t.Run("http+unix", func(t *testing.T) {
		rec, sock := serveUnix(t, "fn.sock", nil)
		check(t, newClient(t, invoker.Options{}), "http+unix://"+sock+"/statefun?x=1", rec)
	})

	t.Run("https+unix", func(t *testing.T) {
		rec, sock := serveUnix(t, "tls.sock", pki.serverConfig())
		c := newClient(t, invoker.Options{TrustCACerts: pki.caFile, ClientCert: pki.certFile, ClientKey: pki.keyFile})
		check(t, c, "https+unix://"+sock+"/statefun?x=1", rec)
	})

	t.Run("missing socket", func(t *testing.T) {
		c := newClient(t, invoker.Options{})
		_, err := c.Invoke(context.Background(), "http+unix://"+dir+"/absent.sock/statefun", invocation(t, counterType, noState))
		if invoker.KindOf(err) != invoker.KindConnect || !strings.Contains(err.Error(), "no such file or directory") {
			t.Errorf("error %v, want KindConnect for a missing socket", err)
		}
	})
}

// TestNewRejectsBadOptions checks New's validation of Options.
func TestNewRejectsBadOptions(t *testing.T) {
	pki := newTestPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		opts invoker.Options
		want string
	}{
		{invoker.Options{CallTimeout: -1}, "invoker: CallTimeout -1ns is negative"},
		{invoker.Options{ConnectTimeout: -time.Second}, "invoker: ConnectTimeout -1s is negative"},
		{invoker.Options{PoolTTL: -time.Second}, "invoker: PoolTTL -1s is negative"},
		{invoker.Options{PoolSize: -1}, "invoker: PoolSize -1 is negative"},
		{invoker.Options{PayloadMaxBytes: -1}, "invoker: PayloadMaxBytes -1 is negative"},
		{invoker.Options{ClientCert: pki.certFile}, "invoker: ClientCert and ClientKey must be set together"},
		{invoker.Options{TrustCACerts: filepath.Join(t.TempDir(), "absent.pem")}, "invoker: reading TrustCACerts: open "},
		{invoker.Options{TrustCACerts: notPEM}, "holds no PEM certificate"},
		{invoker.Options{ClientCert: pki.certFile, ClientKey: pki.caFile}, "invoker: loading ClientCert and ClientKey: "},
	}
	for _, tt := range tests {
		c, err := invoker.New(tt.opts)
		if err == nil {
			c.Close()
			t.Errorf("New(%+v) succeeded, want %q", tt.opts, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %q, want %q", tt.opts, err, tt.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, ok := range []string{
		"http://localhost:8000/statefun",
		"https://fn.example.com",
		"http+unix:///run/fn.sock/statefun",
		"https+unix:///run/fn.sock",
	} {
		if err := invoker.CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q) = %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"localhost:8000":             `unsupported scheme "localhost"`,
		"http:///statefun":           "want an absolute URL with a host",
		"http+unix://run/fn.sock/x":  `has no host, but this one has "run"`,
		"http+unix:///run/fn/socket": "with a component ending in .sock",
		"http://h:99999/":            "port 99999 is out of range",
		"http://[::1":                "missing ']' in host",
	} {
		err := invoker.CheckURL(bad)
		if invoker.KindOf(err) != invoker.KindRequest || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckURL(%q) = %v, want KindRequest with %q", bad, err, want)
		}
	}
}
