// Package invoker is the HTTP client that calls remote functions: it sends one
// ToFunction and returns the FromFunction, speaking the wire dialect of Apache
// Flink StateFun 3.x's default async transport, so functions built with the
// official Go and JS SDKs run unchanged.
//
// Each Invoke is exactly one attempt. Retries and backoff belong to the caller
// (the partition state machine), which owns the call budget; the invoker's job
// is to make one attempt well and to say clearly, through *Error and Kind, why
// it failed.
//
// What goes on the wire:
//
//   - POST over HTTP/1.1 with the serialized ToFunction as body, and the
//     headers Content-Type: application/octet-stream, Accept:
//     application/octet-stream, User-Agent: statefun and Content-Length. The
//     body is never chunked: the Go SDK answers 400 to a request without a
//     Content-Length. Go's transport adds Accept-Encoding: gzip and undoes a
//     gzip response.
//   - The request target is the URL's path and query; an empty path is "/".
//     A fragment is not sent (StateFun's async client would send it; Go's
//     client never does, and no SDK looks at it).
//   - Redirects are not followed and proxy environment variables are ignored,
//     as in StateFun.
//
// Endpoint URLs have the scheme http, https, http+unix or https+unix, and
// package endpointurl decides which are valid (the module loader applies the
// same rules, so a loaded module never names a URL Invoke refuses). A UNIX
// socket URL follows StateFun's rule: the first path component that ends in
// ".sock" ends the socket file's path, and the rest is the request path. So
// http+unix:///run/fn.sock/statefun talks to the socket /run/fn.sock and asks
// for /statefun, with Host: localhost. https+unix speaks TLS over the socket
// and verifies the server certificate for "localhost"; StateFun's okhttp
// transport, its only client with UNIX socket support, speaks plain HTTP for
// https+unix.
//
// What a response must be to count as a success, checked in this order:
//
//   - The status is 2xx (else KindStatus).
//   - Content-Type, when present, names application/octet-stream, compared
//     without case (else KindContentType). A list such as "text/plain,
//     application/octet-stream" is accepted, like StateFun does. Unlike
//     StateFun, media type parameters are ignored, so
//     "application/octet-stream; charset=utf-8" is accepted too: the body is
//     checked by decoding it anyway, and OkHttp-based StateFun accepts it. A
//     missing Content-Type is accepted because the Go SDK writes none and a
//     server that does not sniff, unlike Go's, would send none.
//   - The body, after gzip decoding, is at most Options.PayloadMaxBytes
//     (else KindTooLarge) and not empty (else KindEmptyBody). StateFun would
//     decode an empty body as a FromFunction without effects; we refuse it,
//     because no SDK sends one and accepting it would silently drop the
//     batch's state changes if a proxy truncated the answer.
//   - The body decodes as a FromFunction (else KindDecode). A FromFunction
//     with neither response set is returned as is; it means "no effects".
//
// Files: invoker.go (Client, Invoke, response checks), endpoint.go (URL
// schemes, UNIX sockets, the pooled transport), options.go (Options and
// defaults), errors.go (Error and Kind). The tests call the official Go SDK
// v3.3.0 served in-process by httptest servers (sdk_test.go).
package invoker

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/endpointurl"
	"github.com/statefun-go/statefun/internal/protocol"
)

const (
	// statusBodyRead is how much of a non-2xx body Invoke reads. Reading a
	// short body to its end lets the connection go back to the pool.
	statusBodyRead = 4 << 10
	// statusBodyShown is how much of it goes into Error.Detail: enough for
	// the Go SDK's error text, short enough for one log line.
	statusBodyShown = 200
)

// errCallTimeout is the cause of the per-attempt context when CallTimeout
// fires, which is how Invoke tells its own timeout from the caller's.
var errCallTimeout = errors.New("invoker: call timeout")

// errTooLarge is returned by readBody when the body exceeds the cap.
var errTooLarge = errors.New("invoker: response exceeds the payload cap")

// Client calls the remote functions of one endpoint. It keeps a pool of
// keep-alive connections per host (and per UNIX socket) and is safe for
// concurrent use.
type Client struct {
	opts Options
	tls  *tls.Config
	tcp  *http.Transport
	// header is shared by every request. The transport only reads it, and
	// sharing saves building three headers per call.
	header http.Header

	// targets caches, per URL called, what Invoke derives from it before
	// each request (endpointurl.Parse and the request URL); at most
	// maxTargets URLs, one per function type of the endpoint, beyond which
	// a URL is parsed on every call.
	targets  sync.Map // string → target
	ntargets atomic.Int32

	mu struct {
		sync.Mutex
		// sockets holds one transport per UNIX socket file, created on first
		// use: the transport's pool is keyed by host, and every socket request
		// has the same host.
		sockets map[string]*http.Transport
	}
}

// New returns a Client configured by opts. It returns an error, prefixed
// "invoker: ", when an option is negative, when only one of ClientCert and
// ClientKey is set, or when a TLS file cannot be read or parsed.
func New(opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := opts.tlsConfig()
	if err != nil {
		return nil, err
	}
	c := &Client{
		opts: opts,
		tls:  tlsCfg,
		tcp:  newTransport(opts, tlsCfg, ""),
		header: http.Header{
			"Content-Type": {"application/octet-stream"},
			"Accept":       {"application/octet-stream"},
			"User-Agent":   {"statefun"},
		},
	}
	c.mu.sockets = make(map[string]*http.Transport)
	return c, nil
}

// Close closes the pooled connections that are idle. Calls in flight are not
// interrupted, and the Client stays usable: a later call dials afresh.
func (c *Client) Close() {
	c.tcp.CloseIdleConnections()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.mu.sockets {
		t.CloseIdleConnections()
	}
}

// socketTransport returns the transport for one UNIX socket file.
func (c *Client) socketTransport(socket string) *http.Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.mu.sockets[socket]
	if !ok {
		t = newTransport(c.opts, c.tls, socket)
		c.mu.sockets[socket] = t
	}
	return t
}

// Invoke makes one attempt to send req to the function endpoint at rawURL
// and returns the function's answer. The attempt ends after
// Options.CallTimeout or when ctx ends, whichever is first.
//
// Every failure is an *Error whose Kind says which step failed; see Kind for
// when each is returned. Invoke never retries, except that Go's transport
// resends a request, invisibly, when a pooled connection turns out to have
// been closed by the server before any of the request was written.
func (c *Client) Invoke(ctx context.Context, rawURL string, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	if req == nil {
		return nil, &Error{URL: endpointurl.Redact(rawURL), Kind: KindRequest, Detail: "nil ToFunction"}
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, &Error{URL: endpointurl.Redact(rawURL), Kind: KindRequest, Detail: "cannot marshal the ToFunction", Err: err}
	}
	if int64(len(body)) > c.opts.PayloadMaxBytes {
		return nil, &Error{URL: endpointurl.Redact(rawURL), Kind: KindTooLarge,
			Detail: fmt.Sprintf("request of %d bytes exceeds the payload cap of %d bytes", len(body), c.opts.PayloadMaxBytes)}
	}

	attemptCtx, cancel := context.WithTimeoutCause(ctx, c.opts.CallTimeout, errCallTimeout)
	defer cancel()

	// bytes.Reader gives the request a Content-Length and a GetBody, so it is
	// never chunked and the transport can resend it on a stale connection.
	target, err := c.target(rawURL)
	if err != nil {
		return nil, requestError(rawURL, err)
	}
	hreq, err := http.NewRequestWithContext(attemptCtx, http.MethodPost, target.url, bytes.NewReader(body))
	if err != nil {
		return nil, requestError(rawURL, err)
	}
	hreq.Header = c.header
	transport := c.tcp
	if target.socket != "" {
		transport = c.socketTransport(target.socket)
	}

	// RoundTrip rather than an http.Client: a Client would follow redirects,
	// turning a POST into a GET on 301-303.
	resp, err := transport.RoundTrip(hreq)
	if err != nil {
		kind, detail, cause := c.classify(ctx, attemptCtx, err)
		return nil, &Error{URL: endpointurl.Redact(rawURL), Kind: kind, Detail: detail, Err: cause}
	}
	defer resp.Body.Close()
	from, e := c.readResponse(ctx, attemptCtx, resp)
	if e != nil {
		e.URL = endpointurl.Redact(rawURL)
		e.StatusCode = resp.StatusCode
		return nil, e
	}
	return from, nil
}

// classify turns a failed round trip or body read into a Kind, a Detail and
// the error to wrap. ctx is the caller's context and attemptCtx the one
// bounded by CallTimeout.
func (c *Client) classify(ctx, attemptCtx context.Context, err error) (Kind, string, error) {
	if ctx.Err() != nil {
		return KindCanceled, "abandoned by the caller", context.Cause(ctx)
	}
	if context.Cause(attemptCtx) == errCallTimeout {
		return KindTimeout, fmt.Sprintf("no answer within the call timeout of %v", c.opts.CallTimeout), context.DeadlineExceeded
	}
	var de *dialError
	if errors.As(err, &de) {
		return KindConnect, "cannot connect", de.err
	}
	return KindTransport, "connection failed", err
}

// readResponse checks resp and decodes its body. The Error it returns lacks
// URL and StatusCode, which Invoke fills in.
func (c *Client) readResponse(ctx, attemptCtx context.Context, resp *http.Response) (*protocol.FromFunction, *Error) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, statusBodyRead))
		return nil, &Error{Kind: KindStatus, Detail: describeStatus(resp, text)}
	}
	if got, ok := octetStream(resp.Header); !ok {
		return nil, &Error{Kind: KindContentType,
			Detail: fmt.Sprintf("function answered Content-Type %q, want application/octet-stream", got)}
	}
	// The transport removes Content-Encoding when it undoes the gzip it asked
	// for. Anything left was not asked for: StateFun also accepts deflate,
	// but it advertises deflate and we do not, so no correct server sends it.
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return nil, &Error{Kind: KindDecode,
			Detail: fmt.Sprintf("function answered Content-Encoding %q, which was not asked for", enc)}
	}
	limit := c.opts.PayloadMaxBytes
	if resp.ContentLength > limit {
		return nil, &Error{Kind: KindTooLarge,
			Detail: fmt.Sprintf("response of %d bytes exceeds the payload cap of %d bytes", resp.ContentLength, limit)}
	}
	body, err := readBody(resp.Body, resp.ContentLength, limit)
	switch {
	case err == errTooLarge:
		return nil, &Error{Kind: KindTooLarge,
			Detail: fmt.Sprintf("response exceeds the payload cap of %d bytes", limit)}
	case isGzipError(err):
		return nil, &Error{Kind: KindDecode, Detail: "cannot decompress the gzip response", Err: err}
	case err != nil:
		kind, detail, cause := c.classify(ctx, attemptCtx, err)
		if kind == KindTransport {
			detail = "connection failed while reading the response"
		}
		return nil, &Error{Kind: kind, Detail: detail, Err: cause}
	case len(body) == 0:
		return nil, &Error{Kind: KindEmptyBody,
			Detail: fmt.Sprintf("function answered %s with an empty body", statusLine(resp))}
	}
	from := new(protocol.FromFunction)
	if err := proto.Unmarshal(body, from); err != nil {
		return nil, &Error{Kind: KindDecode,
			Detail: fmt.Sprintf("the %d-byte response is not a FromFunction", len(body)), Err: err}
	}
	return from, nil
}

// readBody reads r to its end, up to limit bytes. length is the announced
// Content-Length, or -1. It returns errTooLarge when r holds more than limit
// bytes.
//
// Reading to EOF, rather than stopping after length bytes, is what returns
// the connection to the pool.
func readBody(r io.Reader, length, limit int64) ([]byte, error) {
	size := int64(512)
	if length >= 0 {
		size = length + 1 // room for the final zero-byte read, so no regrowth
	}
	buf := make([]byte, 0, size)
	lr := &io.LimitedReader{R: r, N: limit + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > limit {
		return nil, errTooLarge
	}
	return buf, nil
}

// isGzipError reports whether err comes from undoing a corrupt gzip body.
func isGzipError(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &corrupt)
}

// octetStream reports whether h's Content-Type names
// application/octet-stream, or is absent, and returns what it holds.
func octetStream(h http.Header) (string, bool) {
	values := h.Values("Content-Type")
	if len(values) == 0 {
		return "", true
	}
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			mediaType, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mediaType), "application/octet-stream") {
				return v, true
			}
		}
	}
	return strings.Join(values, ", "), false
}

// statusLine returns "500 Internal Server Error" for resp.
func statusLine(resp *http.Response) string {
	if resp.Status != "" {
		return resp.Status
	}
	return strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
}

// describeStatus writes the Detail of a KindStatus error, quoting the start
// of the body as text: the Go SDK puts the function's error there (the JS
// SDK sends nothing).
func describeStatus(resp *http.Response, body []byte) string {
	status := statusLine(resp)
	if loc := resp.Header.Get("Location"); loc != "" {
		// Redirects are not followed; say where to, so the endpoint
		// configuration can be fixed.
		status += " to " + loc
	}
	text := strings.TrimSpace(string(body))
	if text == "" {
		return fmt.Sprintf("function answered %s with an empty body", status)
	}
	if len(text) <= statusBodyShown {
		return fmt.Sprintf("function answered %s: %q", status, text)
	}
	cut := statusBodyShown
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return fmt.Sprintf("function answered %s: %q (truncated)", status, text[:cut])
}

// target is what a request to a URL needs of it: the http(s) URL to send
// to and the UNIX socket file, if any.
type target struct {
	url, socket string
}

// maxTargets bounds Client.targets.
const maxTargets = 4096

// target returns rawURL's target, parsed once per URL.
func (c *Client) target(rawURL string) (target, error) {
	if t, ok := c.targets.Load(rawURL); ok {
		return t.(target), nil
	}
	p, err := endpointurl.Parse(rawURL)
	if err != nil {
		return target{}, err
	}
	t := target{url: p.URL.String(), socket: p.Socket}
	if c.ntargets.Load() < maxTargets {
		if _, loaded := c.targets.LoadOrStore(rawURL, t); !loaded {
			c.ntargets.Add(1)
		}
	}
	return t, nil
}
