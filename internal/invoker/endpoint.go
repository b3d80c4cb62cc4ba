package invoker

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"

	"github.com/statefun-go/statefun/internal/endpointurl"
)

// CheckURL reports whether Invoke can address rawURL, without connecting; use
// it to reject a bad endpoint when configuration is loaded. It returns nil or
// the KindRequest *Error that Invoke would return for rawURL. The rules are
// those of package endpointurl, which the module loader applies too.
func CheckURL(rawURL string) error {
	if _, err := endpointurl.Parse(rawURL); err != nil {
		return requestError(rawURL, err)
	}
	return nil
}

// requestError wraps a failure to form a request for rawURL.
func requestError(rawURL string, err error) *Error {
	var ue *endpointurl.Error
	if errors.As(err, &ue) {
		// The endpointurl.Error repeats the whole URL, which our message
		// already shows.
		err = errors.New(ue.Reason)
	}
	return &Error{URL: endpointurl.Redact(rawURL), Kind: KindRequest, Detail: "bad endpoint URL", Err: err}
}

// dialError marks a failure to establish a connection, so that Invoke can
// tell "nothing was sent" (KindConnect) from a connection that broke later
// (KindTransport). The transport returns dial errors unwrapped, so the mark
// survives.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// newTransport builds the pooled HTTP/1.1 transport for TCP endpoints
// (socket == "") or for one UNIX socket.
func newTransport(o Options, tlsCfg *tls.Config, socket string) *http.Transport {
	netDialer := &net.Dialer{Timeout: o.ConnectTimeout}
	if socket != "" && tlsCfg.ServerName == "" {
		// tls.Dialer takes the server name from the address it dials, which
		// for a socket is a file path.
		tlsCfg = tlsCfg.Clone()
		tlsCfg.ServerName = endpointurl.Localhost
	}
	// The dialer's Timeout covers the TLS handshake too, so ConnectTimeout
	// bounds connect plus handshake as documented.
	tlsDialer := &tls.Dialer{NetDialer: netDialer, Config: tlsCfg}
	where := func(network, addr string) (string, string) {
		if socket != "" {
			return "unix", socket
		}
		return network, addr
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		network, addr = where(network, addr)
		conn, err := netDialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err}
		}
		return conn, nil
	}
	dialTLS := func(ctx context.Context, network, addr string) (net.Conn, error) {
		network, addr = where(network, addr)
		conn, err := tlsDialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err}
		}
		return conn, nil
	}

	// StateFun speaks HTTP/1.1 only, one request per connection at a time;
	// some SDK servers (the JS SDK's plain http.createServer) speak nothing
	// else.
	var protocols http.Protocols
	protocols.SetHTTP1(true)

	return &http.Transport{
		// StateFun ignores proxy settings, and an HTTP_PROXY meant for other
		// traffic must not capture calls to functions.
		Proxy:          nil,
		DialContext:    dial,
		DialTLSContext: dialTLS,
		Protocols:      &protocols,
		// The default MaxIdleConnsPerHost is 2, which under load would close
		// and redial nearly every connection: a Client calls one host hard.
		MaxIdleConns:        o.PoolSize,
		MaxIdleConnsPerHost: o.PoolSize,
		MaxConnsPerHost:     o.PoolSize,
		IdleConnTimeout:     o.PoolTTL,
		// DisableCompression stays false: the transport then sends
		// Accept-Encoding: gzip and undoes it transparently, which stands in
		// for StateFun's "gzip,deflate" (see readResponse for deflate).
	}
}
