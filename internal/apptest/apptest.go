// Package apptest starts the runtime in-process for tests of what stands
// on its state API (the CLI, the Go client): an official-Go-SDK function
// example/person, optional TLS and tokens.
package apptest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

// The function under test, built with the official Go SDK: example/person
// counts its messages in "visits" and declares a string and a JSON state it
// never writes, so the tests own them.
var (
	visitsSpec  = statefun.ValueSpec{Name: "visits", ValueType: statefun.Int32Type}
	nameSpec    = statefun.ValueSpec{Name: "name", ValueType: statefun.StringType}
	profileType = statefun.MakeJsonType(statefun.TypeNameFrom("example/Profile"))
	profileSpec = statefun.ValueSpec{Name: "profile", ValueType: profileType}
)

func PersonFunctions(t testing.TB) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("example/person"),
		States:       []statefun.ValueSpec{visitsSpec, nameSpec, profileSpec},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int32
			ctx.Storage().Get(visitsSpec, &n)
			ctx.Storage().Set(visitsSpec, n+1)
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

func FreePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Runtime is a statefun app started in-process.
type Runtime struct {
	API     string // the admin listener's URL
	Ingress string
	HTTP    *http.Client // trusts the runtime's certificate, with TLS
	Token   string       // a read-write token, with tokens
}

// Client returns a client of the runtime's state API.
func (rt *Runtime) Client(t *testing.T, opts ...stateclient.Option) *stateclient.Client {
	t.Helper()
	base := []stateclient.Option{stateclient.WithHTTPClient(rt.HTTP), stateclient.WithToken(rt.Token)}
	c, err := stateclient.New(rt.API, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Start starts the runtime on a fresh store with example/person, and
// waits until the function has registered its states (one message to
// example/person/seed). opts adjust the app's configuration.
func Start(t *testing.T, opts ...func(*app.Config)) *Runtime {
	dir := t.TempDir()
	in := FreePort(t)
	mod := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: example/*
  urlPathTemplate: %s/statefun
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
`, PersonFunctions(t), in)
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{ModulePath: path, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Partitions: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := app.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	rt := &Runtime{API: scheme + "://" + a.Addr("admin"), Ingress: fmt.Sprintf("http://127.0.0.1:%d", in)}
	if cfg.TLSCert != "" {
		rt.HTTP = ClientTrusting(t, cfg.TLSCert)
	}
	if len(cfg.API.Tokens) > 0 {
		rt.Token = cfg.API.Tokens[0].Secret
	}
	rt.Send(t, "seed")
	c := rt.Client(t)
	seed := stateclient.Address{Namespace: "example", Type: "person", ID: "seed"}
	deadline := time.Now().Add(10 * time.Second)
	// The value is readable once applied; the registration shows in the
	// API's listings once the commit that learned it is durable.
	registered := func() bool {
		ts, err := c.ListTypes(context.Background(), "example")
		if err != nil {
			return false
		}
		for _, ti := range ts.Types {
			if ti.Type == "person" && ti.Registered {
				return true
			}
		}
		return false
	}
	for {
		_, err := c.Get(context.Background(), seed, "visits", "")
		if err == nil && registered() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the function did not run: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return rt
}

// Send sends one message to example/person/<id> through the ingress.
func (rt *Runtime) Send(t *testing.T, id string) {
	req, _ := http.NewRequest(http.MethodPut, rt.Ingress+"/example/person/"+PathEscape(id), strings.NewReader("hi"))
	req.Header.Set("Content-Type", "application/vnd.example/ping")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ingress answered %s", resp.Status)
	}
}

func PathEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "%", "%25"), "/", "%2F")
}

// WithTLS makes the runtime serve https with a fresh self-signed
// certificate for 127.0.0.1.
func WithTLS(t *testing.T) func(*app.Config) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "statefun test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return func(c *app.Config) { c.TLSCert, c.TLSKey = certFile, keyFile }
}

// ClientTrusting returns an HTTP client that trusts the PEM certificate in
// file.
func ClientTrusting(t *testing.T, file string) *http.Client {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// WithTokens gives the API two tokens: "admin" (read,write, the runtime's
// client uses it) and "viewer" (read).
func WithTokens(c *app.Config) {
	c.API.Tokens = []stateapi.Token{
		{Name: "admin", Secret: "admin-secret-0123456789", Scopes: []string{stateapi.ScopeRead, stateapi.ScopeWrite}},
		{Name: "viewer", Secret: "viewer-secret-0123456789", Scopes: []string{stateapi.ScopeRead}},
	}
}
