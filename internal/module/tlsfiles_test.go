package module

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
)

// writeFile writes a file under dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadModule writes src as module.yaml in dir and loads it.
func loadModule(t *testing.T, dir, src string) (*Module, error) {
	t.Helper()
	return Load(writeFile(t, dir, "module.yaml", []byte(src)))
}

// tlsEndpoint is an async endpoint whose transport properties are props,
// each line indented by four spaces.
func tlsEndpoint(url string, props ...string) string {
	s := "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: ns/*\n  urlPathTemplate: " + url + "\n  transport:\n"
	for _, p := range props {
		s += "    " + p + "\n"
	}
	return s
}

// TestTrustCACertsFileURL is StateFun's smoke-test form, trust_cacerts:
// file:/path/ca.pem: the module loads, and a call over TLS is verified
// against that CA.
func TestTrustCACertsFileURL(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := proto.Marshal(&protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{
			InvocationResult: &protocol.FromFunction_InvocationResponse{}}})
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := writeFile(t, dir, "server ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	escaped := (&url.URL{Path: ca}).EscapedPath()

	for _, loc := range []string{"file:" + escaped, "file://" + escaped, "file://localhost" + escaped, "\"" + ca + "\""} {
		t.Run(loc, func(t *testing.T) {
			m, err := loadModule(t, dir, tlsEndpoint(srv.URL+"/{function.name}", "trust_cacerts: "+loc))
			if err != nil {
				t.Fatal(err)
			}
			tr := m.Endpoints[0].Transport
			if tr.TrustCACerts != ca {
				t.Fatalf("TrustCACerts = %q, want %q", tr.TrustCACerts, ca)
			}
			c, err := invoker.New(invoker.Options{TrustCACerts: tr.TrustCACerts})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			typ := address.TypeName{Namespace: "ns", Name: "fn"}
			_, err = c.Invoke(context.Background(), m.Endpoints[0].URL(typ), &protocol.ToFunction{Request: &protocol.ToFunction_Invocation_{
				Invocation: &protocol.ToFunction_InvocationBatchRequest{Target: &protocol.Address{Namespace: "ns", Type: "fn", Id: "1"}}}})
			if err != nil {
				t.Fatalf("call verified against %s: %v", loc, err)
			}
		})
	}
}

// testKeyPair writes a self-signed certificate and its PKCS#8 key.
func testKeyPair(t *testing.T, dir string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "statefun"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "client.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		writeFile(t, dir, "client.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// TestClientCertFileURL: client_cert and client_key take the same forms,
// and the invoker accepts what the loader resolved.
func TestClientCertFileURL(t *testing.T) {
	dir := t.TempDir()
	cert, key := testKeyPair(t, dir)
	m, err := loadModule(t, dir, tlsEndpoint("https://h/", "client_cert: file:"+cert, "client_key: file://"+key))
	if err != nil {
		t.Fatal(err)
	}
	tr := m.Endpoints[0].Transport
	if tr.ClientCert != cert || tr.ClientKey != key {
		t.Fatalf("ClientCert, ClientKey = %q, %q; want %q, %q", tr.ClientCert, tr.ClientKey, cert, key)
	}
	c, err := invoker.New(invoker.Options{ClientCert: tr.ClientCert, ClientKey: tr.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestTLSFileErrors: every problem with a TLS property is reported at the
// property's line, with what to do.
func TestTLSFileErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := testKeyPair(t, dir)
	notPEM := writeFile(t, dir, "ca.txt", []byte("not a certificate\n"))
	encrypted := writeFile(t, dir, "enc.p8", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}))
	otherCert, _ := testKeyPair(t, t.TempDir())
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name  string
		props []string
		line  int
		field string
		msg   string
	}{
		{"missing file", []string{"trust_cacerts: file:" + missing}, 6, "spec.transport.trust_cacerts",
			"cannot read file:" + missing + ": no such file or directory"},
		{"not PEM", []string{"call: 1s", "trust_cacerts: " + notPEM}, 7, "spec.transport.trust_cacerts",
			notPEM + " holds no PEM certificate"},
		{"a directory", []string{"trust_cacerts: file:" + dir}, 6, "spec.transport.trust_cacerts",
			"is not a regular file"},
		{"classpath", []string{"trust_cacerts: classpath:certs/a_ca.pem"}, 6, "spec.transport.trust_cacerts",
			`"classpath:certs/a_ca.pem" is a resource on StateFun's Java class path, which this runtime does not have; put the file on disk and write its path, such as file:/etc/statefun/certs/a_ca.pem`},
		{"http scheme", []string{"trust_cacerts: https://example.com/ca.pem"}, 6, "spec.transport.trust_cacerts",
			`unsupported scheme "https"`},
		{"remote file host", []string{"trust_cacerts: file://server/ca.pem"}, 6, "spec.transport.trust_cacerts",
			`names host "server"`},
		{"empty", []string{"trust_cacerts: ''"}, 6, "spec.transport.trust_cacerts", "must not be empty"},
		{"key password", []string{"client_cert: " + cert, "client_key: " + key, "client_key_password: /pw.txt"}, 8,
			"spec.transport.client_key_password", "encrypted client keys are not supported"},
		{"cert without key", []string{"client_cert: " + cert}, 6, "spec.transport.client_cert", "client_cert needs client_key too"},
		{"key without cert", []string{"call: 1s", "client_key: " + key}, 7, "spec.transport.client_key", "client_key needs client_cert too"},
		{"cert not PEM", []string{"client_cert: " + notPEM, "client_key: " + key}, 6, "spec.transport.client_cert", "holds no PEM certificate"},
		{"encrypted key", []string{"client_cert: " + cert, "client_key: " + encrypted}, 7, "spec.transport.client_key", "holds an encrypted key"},
		{"key of another cert", []string{"client_cert: " + otherCert, "client_key: " + key}, 7, "spec.transport.client_key",
			"are not a certificate and its key: tls: private key does not match public key"},
		{"missing key file", []string{"client_cert: " + cert, "client_key: file:" + missing}, 7, "spec.transport.client_key",
			"no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadModule(t, dir, tlsEndpoint("https://h/", tc.props...))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load = %v, want Errors", err)
			}
			e := errs[0]
			if !strings.HasSuffix(e.File, "module.yaml") || e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %s\nwant line %d field %s msg containing %q", err, tc.line, tc.field, tc.msg)
			}
		})
	}
}
