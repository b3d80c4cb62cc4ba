package kafkaclient

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// roundTrip produces one record with the egress properties and reads it
// back with the ingress properties, both against addr. It returns the
// produce error, if any.
func roundTrip(t *testing.T, addr string, props ...prop) error {
	t.Helper()
	p, err := ForEgress(egressAt(t, addr, "at-least-once", props...), nil)
	if err != nil {
		t.Fatalf("ForEgress: %v", err)
	}
	c, err := ForIngress(ingressAt(t, addr, props...), nil)
	if err != nil {
		t.Fatalf("ForIngress: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prod := client(t, p.Opts, kgo.RecordRetries(2), kgo.RequestRetries(2))
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte("k"), Value: []byte("hello")}).FirstErr(); err != nil {
		return err
	}
	cons := client(t, c.Opts, kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cons.PollRecords(ctx, 1)
	if err := fs.Err0(); err != nil {
		t.Fatalf("poll: %v", err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("read back %v", recs)
	}
	return nil
}

// pingErr connects to addr with the ingress properties and returns why
// it could not, nil when it could. Ping tries each broker once, so a
// refused handshake is reported at once instead of retried.
func pingErr(t *testing.T, addr string, props ...prop) error {
	t.Helper()
	c, err := ForIngress(ingressAt(t, addr, props...), nil)
	if err != nil {
		t.Fatalf("ForIngress: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client(t, c.Opts).Ping(ctx)
}

func cluster(t *testing.T, opts ...kfake.Opt) string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

func jaasFor(module, user, pass string) string {
	return "org.apache.kafka.common.security." + module + " required username=\"" + user + "\" password=\"" + pass + "\";"
}

// TestKfakeSASLOverTLS: SASL_SSL with PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 against kfake with TLS from a generated CA, the trust
// store a PEM file; a wrong password is refused by the broker.
func TestKfakeSASLOverTLS(t *testing.T) {
	pki := newPKI(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pki.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ mech, module string }{
		{"PLAIN", "plain.PlainLoginModule"},
		{"SCRAM-SHA-256", "scram.ScramLoginModule"},
		{"SCRAM-SHA-512", "scram.ScramLoginModule"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			addr := cluster(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}}),
				kfake.EnableSASL(), kfake.Superuser(tc.mech, "alice", "right-pw"))
			props := func(pass string) []prop {
				return []prop{{"security.protocol", "SASL_SSL"}, {"sasl.mechanism", tc.mech},
					{"sasl.jaas.config", jaasFor(tc.module, "alice", pass)},
					{"ssl.truststore.type", "PEM"}, {"ssl.truststore.location", ca}}
			}
			if err := roundTrip(t, addr, props("right-pw")...); err != nil {
				t.Fatalf("with the right password: %v", err)
			}
			err := pingErr(t, addr, props("wrong-pw")...)
			// kfake closes the connection on a failed authentication; the
			// same client with the right password got through above.
			if err == nil {
				t.Fatal("a wrong password was accepted")
			}
			if strings.Contains(err.Error(), "wrong-pw") {
				t.Errorf("the client error shows the password: %v", err)
			}
		})
	}
}

// TestKfakeSASLPlaintext: SASL_PLAINTEXT without TLS.
func TestKfakeSASLPlaintext(t *testing.T) {
	addr := cluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "bob", "pw"))
	if err := roundTrip(t, addr, prop{"security.protocol", "SASL_PLAINTEXT"}, prop{"sasl.mechanism", "SCRAM-SHA-256"},
		prop{"sasl.jaas.config", jaasFor("scram.ScramLoginModule", "bob", "pw")}); err != nil {
		t.Fatal(err)
	}
}

// TestKfakeMutualTLS: the broker requires a client certificate; the key
// store is given inline as PEM.
func TestKfakeMutualTLS(t *testing.T) {
	pki := newPKI(t)
	addr := cluster(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.pool}))
	if err := roundTrip(t, addr, prop{"security.protocol", "SSL"},
		prop{"ssl.truststore.type", "PEM"}, prop{"ssl.truststore.certificates", string(pki.caPEM)},
		prop{"ssl.keystore.type", "PEM"}, prop{"ssl.keystore.certificate.chain", string(pki.clientCertPEM)},
		prop{"ssl.keystore.key", string(pki.clientKeyPEM)}); err != nil {
		t.Fatal(err)
	}
}

// TestKfakeHostnameCheck: a broker certificate for another name is
// refused, unless ssl.endpoint.identification.algorithm is empty; a
// certificate from an unknown CA is refused either way.
func TestKfakeHostnameCheck(t *testing.T) {
	pki := newPKI(t)
	addr := cluster(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.otherServer}}))
	trust := []prop{{"security.protocol", "SSL"}, {"ssl.truststore.type", "PEM"}, {"ssl.truststore.certificates", string(pki.caPEM)}}
	if err := pingErr(t, addr, trust...); err == nil || !strings.Contains(err.Error(), "x509: cannot validate certificate for 127.0.0.1") {
		t.Fatalf("a certificate for another host name: %v; want a host name error", err)
	}
	if err := roundTrip(t, addr, append(trust, prop{"ssl.endpoint.identification.algorithm", ""})...); err != nil {
		t.Fatalf("without host name check: %v", err)
	}
	other := newPKI(t)
	if err := pingErr(t, addr, prop{"security.protocol", "SSL"}, prop{"ssl.truststore.type", "PEM"},
		prop{"ssl.truststore.certificates", string(other.caPEM)}, prop{"ssl.endpoint.identification.algorithm", ""}); err == nil ||
		!strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a certificate from an untrusted CA: %v; want an unknown authority error", err)
	}
}
