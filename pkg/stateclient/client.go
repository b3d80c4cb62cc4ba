// Package stateclient is a Go client of the statefun state access API: read,
// write and delete the persisted state of any stateful function while the
// application runs (docs/reference/state-api.md in the statefun repository is the
// contract; GET /openapi.json on a running server is its machine-readable
// form).
//
// A Client talks to one server (the admin listener of `statefun run`,
// http://127.0.0.1:8070 by default):
//
//	c, err := stateclient.New("http://127.0.0.1:8070", stateclient.WithToken(tok))
//	v, err := c.Get(ctx, stateclient.Address{Namespace: "example", Type: "person", ID: "Bob"}, "visits", "text/plain")
//	rc, err := c.Put(ctx, addr, "visits", []byte("42"), "text/plain", stateclient.PutOptions{IfMatch: v.Version})
//
// Every namespace, type, id and state name is percent-encoded as one path
// segment, so ids may contain '/', '%', spaces or emoji.
//
// Errors answered by the server are a *ProblemError (the API's
// application/problem+json body); IsNotFound, IsPreconditionFailed and the
// other Is functions classify them. Errors of the transport are returned
// wrapped, prefixed "stateclient: ".
package stateclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Client is a client of one state API server. It is safe for concurrent use.
// The zero value is not usable; call New.
type Client struct {
	base *url.URL // scheme, host and path prefix, no trailing '/'
	cfg  config
	hc   *http.Client
}

// New returns a client of the server at baseURL, e.g.
// "http://127.0.0.1:8070" or "https://statefun.example:8070/prefix". A
// baseURL without a scheme gets "http://". It returns an error when baseURL
// is not an http or https URL, or carries a query or fragment.
func New(baseURL string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	raw := strings.TrimSpace(baseURL)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("stateclient: server URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("stateclient: server URL %q: want http or https, not %s", baseURL, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("stateclient: server URL %q has no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("stateclient: server URL %q: a query, fragment or user info is not allowed", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")

	hc := cfg.httpClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 16 // one host, called hard; the default is 2
		hc = &http.Client{Transport: t}
	} else {
		copied := *hc
		hc = &copied
	}
	// The API never redirects. Following one would be wrong (a 301/302 turns
	// a PUT into a GET of another path), so a redirect is surfaced as an
	// error instead.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: u, cfg: cfg, hc: hc}, nil
}

// BaseURL returns the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// escapeSegment percent-encodes one path segment. "." and ".." are encoded
// too (as %2E), or the server's path cleaning would treat them as directory
// steps.
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// endpoint returns the URL of route (a fixed path such as "state") followed
// by segs, each escaped as one segment.
func (c *Client) endpoint(route string, segs []string, q url.Values) string {
	esc := c.base.EscapedPath() + "/" + route
	for _, s := range segs {
		esc += "/" + escapeSegment(s)
	}
	u := c.base.Scheme + "://" + c.base.Host + esc
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// checkSegments returns an ErrInvalidAddress error when a segment is empty
// or not valid UTF-8; names says what each segment is.
func checkSegments(names []string, segs []string) error {
	for i, s := range segs {
		if s == "" {
			return fmt.Errorf("%w: the %s is empty", ErrInvalidAddress, names[i])
		}
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: the %s is not valid UTF-8", ErrInvalidAddress, names[i])
		}
	}
	return nil
}

// request is one call to the API.
type request struct {
	method string
	url    string
	header http.Header
	body   []byte
	wait   time.Duration // added to the timeout (long-polls)
}

// response is a successful answer: any status below 300.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends r and reads the whole answer. A status of 300 or more is returned
// as a *ProblemError.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout+r.wait)
		defer cancel()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
	if err != nil {
		return nil, fmt.Errorf("stateclient: %w", err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if c.cfg.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.token)
	}
	if c.cfg.userAgent != "" {
		req.Header.Set("User-Agent", c.cfg.userAgent)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stateclient: %s %s: %w", r.method, req.URL.Path, unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("stateclient: %s %s: reading the answer: %w", r.method, req.URL.Path, err)
	}
	if resp.StatusCode >= 300 {
		return nil, problemOf(r.method, req.URL, resp, b)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the
// whole URL; the caller names the method and path itself.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func decodeJSON(resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("stateclient: the server's answer is not the expected JSON: %w", err)
	}
	return nil
}

// Get reads one entry. accept is the Accept header: "" or "*/*" for the
// server's default (text for io.statefun.types/string, the exact bytes for
// every other type), "application/octet-stream" for the exact stored bytes,
// "text/plain" for the value as text (406 when it has none), or a list with
// qualities such as "text/plain, application/octet-stream;q=0.5". For the
// JSON envelope use GetEnvelope.
//
// An entry without a value is a *ProblemError for which IsNotFound is true.
func (c *Client) Get(ctx context.Context, a Address, state, accept string) (*Value, error) {
	if err := a.check(state); err != nil {
		return nil, err
	}
	h := http.Header{}
	if accept != "" {
		h.Set("Accept", accept)
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", a.segments(state), nil), header: h})
	if err != nil {
		return nil, err
	}
	v := &Value{
		Bytes:       resp.body,
		ContentType: resp.header.Get("Content-Type"),
		Typename:    resp.header.Get("Statefun-Type"),
		Version:     trimETag(resp.header.Get("ETag")),
	}
	if exp := resp.header.Get("Statefun-Expires-At"); exp != "" {
		if t, err := time.Parse(time.RFC3339Nano, exp); err == nil {
			v.ExpiresAt = t
		}
	}
	return v, nil
}

// GetEnvelope reads one entry as the JSON envelope (Accept:
// application/json), which every entry has. Edit Value (or ValueBase64) and
// pass it to PutEnvelope to write it back.
func (c *Client) GetEnvelope(ctx context.Context, a Address, state string) (*Envelope, error) {
	if err := a.check(state); err != nil {
		return nil, err
	}
	h := http.Header{"Accept": {"application/json"}}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", a.segments(state), nil), header: h})
	if err != nil {
		return nil, err
	}
	env := new(Envelope)
	if err := decodeJSON(resp, env); err != nil {
		return nil, err
	}
	return env, nil
}

// Put sets or overwrites one entry and returns the receipt. contentType says
// what body is: "application/octet-stream" (the exact bytes to store, also
// the default when contentType is ""), "text/plain" (text parsed into the
// target type) or "application/json" (the envelope of GetEnvelope). With
// o.Ack == AckAccepted the receipt's status is "accepted"; poll it with
// Receipt.
//
// A failed condition is a *ProblemError with status 412 whose CurrentVersion
// is the entry's version now (IsPreconditionFailed).
func (c *Client) Put(ctx context.Context, a Address, state string, body []byte, contentType string, o PutOptions) (*Receipt, error) {
	if err := a.check(state); err != nil {
		return nil, err
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	h, q, err := mutationHeaders(o.IfMatch, o.IfNoneMatch, o.Ack, o.Reason)
	if err != nil {
		return nil, err
	}
	h.Set("Content-Type", contentType)
	if o.Typename != "" {
		h.Set("Statefun-Type", o.Typename)
	}
	if body == nil {
		body = []byte{}
	}
	resp, err := c.do(ctx, request{method: http.MethodPut, url: c.endpoint("state", a.segments(state), q), header: h, body: body})
	if err != nil {
		return nil, err
	}
	return decodeReceipt(resp)
}

// PutEnvelope writes env back to the entry it names (env.Address and
// env.State), as the JSON envelope with env's typename and one value: Value
// when it is set, else ValueBase64 (set Value to nil to write exact bytes;
// the server requires the two to agree when both are sent). The version in
// env is not a condition; set o.IfMatch for that. An empty env.Typename
// lets the server choose (see PutOptions.Typename).
func (c *Client) PutEnvelope(ctx context.Context, env *Envelope, o PutOptions) (*Receipt, error) {
	out := map[string]any{}
	if env.Typename != "" {
		out["typename"] = env.Typename
	}
	if env.Value != nil {
		out["value"] = env.Value
	} else {
		out["valueBase64"] = env.ValueBase64
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("stateclient: %w", err)
	}
	a := Address{Namespace: env.Address.Namespace, Type: env.Address.Type, ID: env.Address.ID}
	return c.Put(ctx, a, env.State, body, "application/json", o)
}

// Delete drops one entry and returns the receipt. An entry without a value
// is a *ProblemError with status 404.
func (c *Client) Delete(ctx context.Context, a Address, state string, o DeleteOptions) (*Receipt, error) {
	if err := a.check(state); err != nil {
		return nil, err
	}
	h, q, err := mutationHeaders(o.IfMatch, false, o.Ack, o.Reason)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodDelete, url: c.endpoint("state", a.segments(state), q), header: h})
	if err != nil {
		return nil, err
	}
	return decodeReceipt(resp)
}

// DeleteAddress drops every entry of one function instance, as one mutation
// with one receipt. o.IfMatch must be empty: conditions apply to one entry.
func (c *Client) DeleteAddress(ctx context.Context, a Address, o DeleteOptions) (*Receipt, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	if o.IfMatch != "" {
		return nil, errors.New("stateclient: DeleteAddress: IfMatch applies to one entry, not a whole address")
	}
	h, q, err := mutationHeaders("", false, o.Ack, o.Reason)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodDelete, url: c.endpoint("state", a.segments(), q), header: h})
	if err != nil {
		return nil, err
	}
	return decodeReceipt(resp)
}

func mutationHeaders(ifMatch string, ifNoneMatch bool, ack Ack, reason string) (http.Header, url.Values, error) {
	h := http.Header{}
	q := url.Values{}
	if ifMatch != "" {
		v := trimETag(ifMatch)
		if v == "" || strings.ContainsAny(v, "\" \t\r\n") {
			return nil, nil, fmt.Errorf("stateclient: IfMatch %q is not a version", ifMatch)
		}
		h.Set("If-Match", `"`+v+`"`)
	}
	if ifNoneMatch {
		h.Set("If-None-Match", "*")
	}
	switch ack {
	case "":
	case AckCommitted, AckApplied, AckAccepted:
		q.Set("ack", string(ack))
	default:
		return nil, nil, fmt.Errorf("stateclient: Ack %q: want %s, %s or %s", ack, AckCommitted, AckApplied, AckAccepted)
	}
	if reason != "" {
		if strings.ContainsAny(reason, "\r\n\x00") {
			return nil, nil, errors.New("stateclient: a reason must be one line (it travels in the Statefun-Reason header)")
		}
		h.Set("Statefun-Reason", reason)
	}
	return h, q, nil
}

func decodeReceipt(resp *response) (*Receipt, error) {
	rc := new(Receipt)
	if err := decodeJSON(resp, rc); err != nil {
		return nil, err
	}
	return rc, nil
}

// trimETag returns the version inside an ETag: `"42"` and `W/"42"` give
// "42"; a bare 42 stays 42.
func trimETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	return s
}

// ListEntries returns the entries of one function instance (without their
// values) and the states its type registered.
func (c *Client) ListEntries(ctx context.Context, a Address) (*Entries, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", a.segments(), nil)})
	if err != nil {
		return nil, err
	}
	out := new(Entries)
	if err := decodeJSON(resp, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ListIDs returns one page of the ids of type t that hold state, in order:
// those starting with prefix ("" for all) that sort after after ("" to
// start at the beginning), at most limit of them (0 for the server's
// default of 100; the server allows up to 10000). Page.Next is the after of
// the following page, "" at the end. AllIDs pages through all of them.
func (c *Client) ListIDs(ctx context.Context, t TypeName, prefix, after string, limit int) (*IDPage, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("stateclient: ListIDs: negative limit %d", limit)
	}
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", []string{t.Namespace, t.Type}, q)})
	if err != nil {
		return nil, err
	}
	var raw struct {
		IDs  []string `json:"ids"`
		Next *string  `json:"next"`
	}
	if err := decodeJSON(resp, &raw); err != nil {
		return nil, err
	}
	p := &IDPage{IDs: raw.IDs}
	if raw.Next != nil {
		p.Next = *raw.Next
	}
	if p.IDs == nil {
		p.IDs = []string{}
	}
	return p, nil
}

// AllIDs returns the ids of type t that start with prefix and sort after
// after, fetching pages of pageSize (0: 1000) as the loop goes. An error
// ends the sequence: it is yielded once with an empty id.
func (c *Client) AllIDs(ctx context.Context, t TypeName, prefix, after string, pageSize int) iter.Seq2[string, error] {
	if pageSize <= 0 {
		pageSize = 1000
	}
	return func(yield func(string, error) bool) {
		for {
			p, err := c.ListIDs(ctx, t, prefix, after, pageSize)
			if err != nil {
				yield("", err)
				return
			}
			for _, id := range p.IDs {
				if !yield(id, nil) {
					return
				}
			}
			if p.Next == "" {
				return
			}
			after = p.Next
		}
	}
}

// ListTypes returns the function types that registered states or hold
// state, including types no longer deployed; namespace "" lists every
// namespace, otherwise only that one.
func (c *Client) ListTypes(ctx context.Context, namespace string) (*Types, error) {
	var segs []string
	if namespace != "" {
		if err := checkSegments([]string{"namespace"}, []string{namespace}); err != nil {
			return nil, err
		}
		segs = []string{namespace}
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", segs, nil)})
	if err != nil {
		return nil, err
	}
	out := new(Types)
	if err := decodeJSON(resp, out); err != nil {
		return nil, err
	}
	if out.Namespaces == nil {
		out.Namespaces = []string{}
		seen := map[string]bool{}
		for _, t := range out.Types {
			if !seen[t.Namespace] {
				seen[t.Namespace] = true
				out.Namespaces = append(out.Namespaces, t.Namespace)
			}
		}
	}
	return out, nil
}

// Receipt returns the receipt of mutation id. With wait > 0 the server
// holds the request until the receipt is final (committed or rejected) or
// wait passes (the server caps it, at 60s by default); the client's timeout
// is extended by wait. A mutation the server does not know (or one applied
// with AckApplied and not committed yet) is a 404.
func (c *Client) Receipt(ctx context.Context, id string, wait time.Duration) (*Receipt, error) {
	if err := checkSegments([]string{"mutation id"}, []string{id}); err != nil {
		return nil, err
	}
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("mutations", []string{id}, q), wait: max(wait, 0)})
	if err != nil {
		return nil, err
	}
	return decodeReceipt(resp)
}

// Revert undoes a committed mutation: it restores each entry the mutation
// changed to its before-image, on the condition that the entry still holds
// the version the mutation wrote. It returns one receipt per entry (several
// for a delete of a whole address). reason "" lets the server record
// "revert of <id>". An entry changed since is a 412 (IsPreconditionFailed);
// a mutation that is not committed is a 409.
func (c *Client) Revert(ctx context.Context, id, reason string) ([]Receipt, error) {
	if err := checkSegments([]string{"mutation id"}, []string{id}); err != nil {
		return nil, err
	}
	h, _, err := mutationHeaders("", false, "", reason)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, url: c.endpoint("mutations", []string{id, "revert"}, nil), header: h})
	if err != nil {
		return nil, err
	}
	body := bytes.TrimSpace(resp.body)
	if len(body) > 0 && body[0] == '[' {
		var out []Receipt
		if err := decodeJSON(resp, &out); err != nil {
			return nil, err
		}
		return out, nil
	}
	rc, err := decodeReceipt(resp)
	if err != nil {
		return nil, err
	}
	return []Receipt{*rc}, nil
}

// Audit returns the audit log's records that match f, oldest first. A
// Limit above the server's page size (maxAuditPage) is read page by page.
func (c *Client) Audit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "type": f.Type, "id": f.ID, "state": f.State,
		"principal": f.Principal, "mutation": f.Mutation} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("stateclient: Audit: negative limit %d", f.Limit)
	}
	out := []AuditRecord{}
	for {
		if f.Limit > 0 {
			q.Set("limit", strconv.Itoa(min(f.Limit-len(out), maxAuditPage)))
		}
		resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("audit", nil, q)})
		if err != nil {
			return nil, err
		}
		var page struct {
			Records []AuditRecord `json:"records"`
			Next    *string       `json:"next"`
		}
		if err := decodeJSON(resp, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Records...)
		if f.Limit == 0 || len(out) >= f.Limit || page.Next == nil {
			return out, nil
		}
		q.Set("after", *page.Next)
	}
}

// maxAuditPage is the largest page GET /audit serves (a variable for the
// tests).
var maxAuditPage = 10000

// IsText reports whether a Value's ContentType is text/plain, that is
// whether Bytes is the value's text rather than its stored bytes.
func (v *Value) IsText() bool {
	mt, _, err := mime.ParseMediaType(v.ContentType)
	return err == nil && mt == "text/plain"
}
