package invoker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// unixHost is the Host of every request sent over a UNIX socket. There is no
// host to name; "localhost" is what curl --unix-socket users expect to see,
// and it is also the TLS server name checked for https+unix.
const unixHost = "localhost"

// CheckURL reports whether Invoke can address rawURL, without connecting; use
// it to reject a bad endpoint when configuration is loaded. It returns nil or
// the KindRequest *Error that Invoke would return for rawURL.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err == nil {
		_, err = route(u)
	}
	if err != nil {
		return requestError(rawURL, err)
	}
	return nil
}

// requestError wraps a failure to form a request for rawURL.
func requestError(rawURL string, err error) *Error {
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error repeats the whole URL, which our message already shows.
		err = ue.Err
	}
	return &Error{URL: redact(rawURL), Kind: KindRequest, Detail: "bad endpoint URL", Err: err}
}

// route checks that u is a URL Invoke can send to and returns the UNIX
// socket its requests go through, or "" for TCP. It rewrites a UNIX socket
// URL in place into the http or https URL of the request it stands for. The
// package comment gives the rules.
func route(u *url.URL) (socket string, err error) {
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return "", errors.New("URL has no host")
		}
		return "", nil
	case "http+unix", "https+unix":
	default:
		return "", fmt.Errorf("unsupported scheme %q, want http, https, http+unix or https+unix", u.Scheme)
	}
	if u.Host != "" || u.User != nil {
		return "", fmt.Errorf("%s URL has host %q, want none: write %s:///path/to/fn.sock/request/path", u.Scheme, u.Host, u.Scheme)
	}
	if u.Opaque != "" {
		return "", fmt.Errorf("%s URL needs an absolute socket path: write %s:///path/to/fn.sock/request/path", u.Scheme, u.Scheme)
	}
	// Split the escaped path so that an escaped "/" inside a component does
	// not count as a separator.
	escaped := u.EscapedPath()
	parts := strings.Split(escaped, "/")
	end := -1
	for i, p := range parts {
		name, err := url.PathUnescape(p)
		if err != nil {
			return "", err
		}
		if strings.HasSuffix(name, ".sock") {
			end = i
			break
		}
	}
	if end < 0 {
		return "", fmt.Errorf("%s URL path %q has no component ending in .sock to name the socket file", u.Scheme, u.Path)
	}
	socket, err = url.PathUnescape(strings.Join(parts[:end+1], "/"))
	if err != nil {
		return "", err
	}
	rest := "/" + strings.Join(parts[end+1:], "/")
	path, err := url.PathUnescape(rest)
	if err != nil {
		return "", err
	}
	u.Scheme = strings.TrimSuffix(u.Scheme, "+unix")
	u.Host = unixHost
	u.Path, u.RawPath = path, rest
	return socket, nil
}

// redact returns rawURL with any password replaced, for error messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return rawURL
	}
	return u.Redacted()
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
		tlsCfg.ServerName = unixHost
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
