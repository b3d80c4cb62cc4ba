package stateapi

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/address"
)

// MaxSegmentBytes bounds one unescaped path segment (a namespace, type, id
// or state name). It is the limit every edge that accepts an address
// applies, so whatever is stored can be reached here.
const MaxSegmentBytes = address.MaxSegmentBytes

// splitPath splits an escaped path below a prefix ("/state") into its
// unescaped segments. It splits on '/' before unescaping, so a segment may
// carry an encoded '/' (%2F); every segment must be non-empty, validly
// percent-encoded, valid UTF-8 and at most MaxSegmentBytes long. A literal
// "." or ".." segment is refused: clients, proxies and ServeMux remove or
// resolve dot-segments (RFC 3986 5.2.4), so the address it names depends on
// who handled the URL; an id "." travels as %2E (escapeSegment).
func splitPath(escaped, prefix string) ([]string, error) {
	rest, ok := strings.CutPrefix(escaped, prefix)
	if !ok {
		return nil, fmt.Errorf("the path must start with %s", prefix)
	}
	if rest == "" || rest == "/" {
		return nil, nil
	}
	if rest[0] != '/' {
		return nil, fmt.Errorf("the path must start with %s/", prefix)
	}
	raw := strings.Split(rest[1:], "/")
	out := make([]string, len(raw))
	for i, r := range raw {
		if r == "" {
			return nil, fmt.Errorf("segment %d of the path is empty", i+1)
		}
		if r == "." || r == ".." {
			return nil, fmt.Errorf("segment %d of the path is %q, a dot-segment that clients and proxies remove; percent-encode it (%%2E for each '.')", i+1, r)
		}
		s, err := url.PathUnescape(r)
		if err != nil {
			return nil, fmt.Errorf("segment %d of the path: invalid percent-encoding in %q", i+1, r)
		}
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("segment %d of the path is not valid UTF-8 once unescaped", i+1)
		}
		if len(s) > MaxSegmentBytes {
			return nil, fmt.Errorf("segment %d of the path is %d bytes, over the limit of %d", i+1, len(s), MaxSegmentBytes)
		}
		out[i] = s
	}
	return out, nil
}

// escapeSegment percent-encodes one path segment (a '/' in an id included)
// so that splitPath returns it unchanged: url.PathEscape, and a segment
// that is "." or ".." in %2E form.
func escapeSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}
