package invoker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// The defaults are those of StateFun's async transport
// (io.statefun.transports.v1/async, NettyRequestReplySpec.java).
const (
	// DefaultCallTimeout is the default Options.CallTimeout.
	DefaultCallTimeout = 2 * time.Minute
	// DefaultConnectTimeout is the default Options.ConnectTimeout.
	DefaultConnectTimeout = 20 * time.Second
	// DefaultPoolTTL is the default Options.PoolTTL.
	DefaultPoolTTL = 15 * time.Second
	// DefaultPoolSize is the default Options.PoolSize.
	DefaultPoolSize = 1024
	// DefaultPayloadMaxBytes is the default Options.PayloadMaxBytes, 32 MiB.
	DefaultPayloadMaxBytes = 32 << 20
)

// Options configures a Client. The zero value is valid and gives StateFun's
// defaults; every zero field means "use the default", and negative values are
// rejected by New.
type Options struct {
	// CallTimeout bounds one whole attempt: connecting, sending, waiting and
	// reading the response. Zero means DefaultCallTimeout.
	//
	// In StateFun `call` is the budget for all retries together; here it is
	// per attempt because retries belong to the caller, which should pass a
	// context whose deadline is what is left of its own budget.
	CallTimeout time.Duration

	// ConnectTimeout bounds establishing one connection, the TCP (or UNIX
	// socket) connect plus the TLS handshake. Zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// PoolTTL is how long a pooled keep-alive connection may sit idle before
	// it is closed. Zero means DefaultPoolTTL.
	//
	// StateFun closes a pooled connection once it is older than pool_ttl,
	// busy or not; Go's transport offers no maximum connection age, so this
	// is an idle timeout instead. A connection that is never idle for
	// PoolTTL therefore lives on, and new DNS answers are picked up only
	// when load drops.
	PoolTTL time.Duration

	// PoolSize caps the connections to one host, busy and idle together, and
	// so the calls in flight to it: each connection carries one request at a
	// time (HTTP/1.1). Calls beyond the cap wait for a free connection
	// within their CallTimeout. Zero means DefaultPoolSize.
	PoolSize int

	// PayloadMaxBytes caps the serialized request and the decompressed
	// response body. Zero means DefaultPayloadMaxBytes.
	PayloadMaxBytes int64

	// TrustCACerts names a PEM file of CA certificates. When set, https
	// endpoints are verified against these CAs only, instead of the system
	// roots (as StateFun's trust_cacerts does).
	TrustCACerts string

	// ClientCert names a PEM file of the certificate (chain) presented to
	// https endpoints that ask for one (mutual TLS). Set it together with
	// ClientKey.
	ClientCert string

	// ClientKey names a PEM file of ClientCert's private key, unencrypted:
	// StateFun's client_key_password has no counterpart, so decrypt the key
	// beforehand.
	ClientKey string
}

// withDefaults returns o with every zero field replaced by its default. All
// defaults live here.
func (o Options) withDefaults() Options {
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.PoolTTL == 0 {
		o.PoolTTL = DefaultPoolTTL
	}
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.PayloadMaxBytes == 0 {
		o.PayloadMaxBytes = DefaultPayloadMaxBytes
	}
	return o
}

// validate reports the first field of o (already defaulted) that New cannot
// use.
func (o Options) validate() error {
	switch {
	case o.CallTimeout < 0:
		return fmt.Errorf("invoker: CallTimeout %v is negative", o.CallTimeout)
	case o.ConnectTimeout < 0:
		return fmt.Errorf("invoker: ConnectTimeout %v is negative", o.ConnectTimeout)
	case o.PoolTTL < 0:
		return fmt.Errorf("invoker: PoolTTL %v is negative", o.PoolTTL)
	case o.PoolSize < 0:
		return fmt.Errorf("invoker: PoolSize %d is negative", o.PoolSize)
	case o.PayloadMaxBytes < 0:
		return fmt.Errorf("invoker: PayloadMaxBytes %d is negative", o.PayloadMaxBytes)
	case (o.ClientCert == "") != (o.ClientKey == ""):
		return errors.New("invoker: ClientCert and ClientKey must be set together")
	}
	return nil
}

// tlsConfig builds the client TLS configuration from the file options. It
// reads the files once, in New, so a bad path fails at startup rather than on
// the first https call.
func (o Options) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TrustCACerts != "" {
		pem, err := os.ReadFile(o.TrustCACerts)
		if err != nil {
			return nil, fmt.Errorf("invoker: reading TrustCACerts: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("invoker: TrustCACerts %s holds no PEM certificate", o.TrustCACerts)
		}
		cfg.RootCAs = pool
	}
	if o.ClientCert != "" {
		pair, err := tls.LoadX509KeyPair(o.ClientCert, o.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("invoker: loading ClientCert and ClientKey: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
