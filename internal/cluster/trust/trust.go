// Package trust is what a node of a cluster-mode application believes of
// the others (docs/explanation/cluster.md, "Trust between nodes"). The nodes share a
// cluster secret, which nothing else holds:
//
//   - a member record (package members) carries a MAC under the secret
//     (MAC), so a client that may write the meta topic but lacks the
//     secret cannot publish a record that any node sends requests to;
//
//   - a request one node sends another is signed (NodeAuth.Sign): who
//     sends it, to whom, when, a nonce, the caller the sending node
//     authenticated, the method, the path and query, the headers and the
//     body. The receiving node checks it (NodeAuth.Verify) and takes the
//     caller from it. The caller's own bearer token never leaves the node
//     it was sent to.
//
// The secret is a master credential of the application: whoever holds it
// can publish member records and send requests in the name of any token.
// Keep it as the token file is kept.
package trust

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/privfile"
)

// MinSecretLen is the shortest cluster secret taken, in bytes: an HMAC key
// of 32 random characters is out of reach of a guess.
const MinSecretLen = 32

// CheckSecret refuses a secret shorter than MinSecretLen.
func CheckSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("trust: the cluster secret is %d bytes long; want at least %d random characters (e.g. openssl rand -hex 32)", len(secret), MinSecretLen)
	}
	return nil
}

// LoadSecret reads the cluster secret from a file: its content without
// surrounding white space. It refuses a file that its group or others may
// write (on systems with Unix permissions), as the token file is refused:
// whoever writes it chooses which member records the node trusts. Errors
// are prefixed "trust: " and name the file.
func LoadSecret(path string) ([]byte, error) {
	f, err := privfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trust: cluster secret file: %s", strings.TrimPrefix(err.Error(), "privfile: "))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, fmt.Errorf("trust: cluster secret file: %w", err)
	}
	if len(b) > 4096 {
		return nil, fmt.Errorf("trust: cluster secret file %s is over 4096 bytes: it should hold only the secret", path)
	}
	secret := bytes.TrimSpace(b)
	if err := CheckSecret(secret); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return secret, nil
}

// MAC returns the HMAC-SHA256 under secret of domain and fields. Each is
// written with its length first, so no two lists of fields share an
// input; domain names what is authenticated, so a MAC of one kind of
// message is never taken for another.
func MAC(secret []byte, domain string, fields ...string) []byte {
	h := hmac.New(sha256.New, secret)
	var n [8]byte
	for _, f := range append([]string{domain}, fields...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

// Header carries a node's signature of a request it sends to another node.
const Header = "Statefun-Node-Auth"

// MaxSkew is how far a request's signing time may be from the receiving
// node's clock. A signed request is taken once within it (its nonce is
// remembered that long) and never after.
const MaxSkew = 30 * time.Second

// requestDomain names the MAC of a signed request, with the format's
// version.
const requestDomain = "statefun node request v1"

// Caller is who a node vouches for in a request it signs: the principal
// the state API authenticated (a token's name; "anonymous" without
// tokens) and the scopes of its token.
type Caller struct {
	Principal string
	Scopes    []string
}

// NodeAuth signs the requests a node sends to the other nodes of its
// application and checks the ones they send to it. It is safe for
// concurrent use.
type NodeAuth struct {
	secret    []byte
	app, node string
	now       func() time.Time

	mu     sync.Mutex
	seen   map[string]time.Time // nonce (with its sender) → when it may be forgotten
	pruned time.Time
}

// NewNodeAuth returns the NodeAuth of node in application app under the
// cluster secret.
func NewNodeAuth(secret []byte, app, node string) *NodeAuth {
	return &NodeAuth{secret: slices.Clone(secret), app: app, node: node, now: time.Now, seen: map[string]time.Time{}}
}

// transportHeaders are the headers Go's client writes from the request's
// fields, not from its Header map (a Content-Length copied from another
// request does not reach the wire): they are not signed, and the body is
// signed by its hash instead.
var transportHeaders = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// Sign adds Header to req, a request this node sends to node to on behalf
// of c; body is the request's body (nil: none). It signs every header req
// has now but transportHeaders: call it last, as the receiving node drops
// the headers that were not signed.
func (a *NodeAuth) Sign(req *http.Request, to string, c Caller, body []byte) {
	nonce := make([]byte, 16)
	rand.Read(nonce)
	req.Header.Del(Header)
	names := make([]string, 0, len(req.Header))
	for k := range req.Header {
		if k := http.CanonicalHeaderKey(k); !transportHeaders[k] {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	p := url.Values{
		"v":         {"1"},
		"from":      {a.node},
		"to":        {to},
		"at":        {strconv.FormatInt(a.now().UnixMilli(), 10)},
		"nonce":     {hex.EncodeToString(nonce)},
		"principal": {c.Principal},
		"scopes":    {strings.Join(c.Scopes, ",")},
		"headers":   {strings.Join(names, ",")},
	}
	p.Set("mac", hex.EncodeToString(a.mac(p, req.Method, req.URL.RequestURI(), req.Header, names, body)))
	req.Header.Set(Header, p.Encode())
}

// mac is the MAC of a request with the signature's parameters p (all but
// mac itself) and the headers names.
func (a *NodeAuth) mac(p url.Values, method, uri string, h http.Header, names []string, body []byte) []byte {
	sum := sha256.Sum256(body)
	fields := []string{a.app, p.Get("from"), p.Get("to"), p.Get("at"), p.Get("nonce"), p.Get("principal"), p.Get("scopes"),
		method, uri, hex.EncodeToString(sum[:])}
	for _, n := range names {
		vs := h.Values(n)
		fields = append(fields, n, strconv.Itoa(len(vs)))
		fields = append(fields, vs...)
	}
	return MAC(a.secret, requestDomain, fields...)
}

// Verify checks the signature of r, a request another node sent to this
// one, whose body is body (read by the caller), and returns the node that
// sent it and the caller it vouches for. The signature must verify under
// this node's secret, name this node, be within MaxSkew of this node's
// clock and not have been taken before. On success the headers the sender
// did not sign are removed from r (and Header with them), so that nothing
// added on the way is acted on. Errors are prefixed "trust: " and say what
// to fix.
func (a *NodeAuth) Verify(r *http.Request, body []byte) (from string, c Caller, err error) {
	p, err := url.ParseQuery(r.Header.Get(Header))
	if err != nil || p.Get("v") != "1" || p.Get("from") == "" || p.Get("nonce") == "" || p.Get("mac") == "" {
		return "", Caller{}, fmt.Errorf("trust: %s is not a node signature this build reads (version 1); every node of the application should run the same release", Header)
	}
	got, err := hex.DecodeString(p.Get("mac"))
	if err != nil {
		return "", Caller{}, errors.New("trust: the node signature's mac is not hex")
	}
	var names []string
	if h := p.Get("headers"); h != "" {
		names = strings.Split(h, ",")
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	if !hmac.Equal(got, a.mac(p, r.Method, uri, r.Header, names, body)) {
		return "", Caller{}, fmt.Errorf("trust: the signature of node %s does not verify with this node's cluster secret: every node of the application needs the same secret (--cluster-secret-file or STATEFUN_CLUSTER_SECRET)", p.Get("from"))
	}
	from = p.Get("from")
	if to := p.Get("to"); to != a.node {
		return "", Caller{}, fmt.Errorf("trust: node %s signed the request for node %s, not for this node (%s)", from, to, a.node)
	}
	ms, err := strconv.ParseInt(p.Get("at"), 10, 64)
	if err != nil {
		return "", Caller{}, fmt.Errorf("trust: the signature of node %s has no time", from)
	}
	at, now := time.UnixMilli(ms), a.now()
	if d := now.Sub(at); d > MaxSkew || d < -MaxSkew {
		return "", Caller{}, fmt.Errorf("trust: node %s signed the request at %s, %v from this node's clock (%s); a signature is taken within %v: synchronize the nodes' clocks (NTP)",
			from, at.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), now.UTC().Format(time.RFC3339Nano), MaxSkew)
	}
	if !a.firstUse(from+" "+p.Get("nonce"), at.Add(MaxSkew), now) {
		return "", Caller{}, fmt.Errorf("trust: a request signed by node %s was sent again (its nonce was taken already): a replay is refused", from)
	}
	signed := map[string]bool{}
	for _, n := range names {
		signed[n] = true
	}
	for k := range r.Header {
		if !signed[k] {
			r.Header.Del(k)
		}
	}
	c = Caller{Principal: p.Get("principal")}
	if s := p.Get("scopes"); s != "" {
		c.Scopes = strings.Split(s, ",")
	}
	return from, c, nil
}

// firstUse records nonce until forget and reports whether it was new.
// Nonces past their time are dropped at most once per MaxSkew: a request
// that old is refused by its time already.
func (a *NodeAuth) firstUse(nonce string, forget, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.pruned) > MaxSkew {
		for n, t := range a.seen {
			if now.After(t) {
				delete(a.seen, n)
			}
		}
		a.pruned = now
	}
	if _, dup := a.seen[nonce]; dup {
		return false
	}
	a.seen[nonce] = forget
	return true
}

// LoopbackURL reports whether u is a URL whose host can only name this
// machine's loopback interface: localhost, 127.0.0.0/8 or ::1. Without a
// cluster secret a node sends requests only to such a URL: a member record
// nobody can authenticate may then point only where every genuine node of
// a token-less application listens (its API is loopback-only).
func LoopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	host := p.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}
