// Package endpointurl decides which URLs a remote function endpoint may have
// and where a request for such a URL goes. It is the one rule shared by the
// module loader, which refuses a bad urlPathTemplate when module.yaml is
// loaded, and the invoker, which sends the requests: whatever one accepts the
// other can call, so a function type can never be bound to a URL that fails
// on every call (and would be retried forever).
//
// An endpoint URL has the scheme http, https, http+unix or https+unix
// (compared without case):
//
//   - http and https URLs need a host; a port, when given, is 1 to 65535.
//   - A UNIX socket URL follows StateFun's rule (UnixDomainHttpEndpoint): the
//     first path component that ends in ".sock" ends the socket file's path,
//     and the rest is the request path. So http+unix:///run/fn.sock/statefun
//     talks to the socket /run/fn.sock and asks for /statefun. The rule looks
//     at names only, never at the file system. The host part must be empty
//     (three slashes): StateFun silently ignores it, which hides the typo
//     http+unix://run/fn.sock (the socket /fn.sock, not /run/fn.sock).
//   - No URL may contain a space, a control character or a brace: Java's URI
//     refuses them, so StateFun could not call such a URL either, and a brace
//     is almost always a misspelt {function.name} placeholder.
package endpointurl

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// Localhost is the Host of every request sent over a UNIX socket. There is
// no host to name; "localhost" is what curl --unix-socket users expect to
// see, and it is also the TLS server name checked for https+unix.
const Localhost = "localhost"

// Target is where the requests for one endpoint URL go.
type Target struct {
	// URL is the http or https URL of the request. For a UNIX socket URL it
	// is rewritten: the scheme loses "+unix", the host is Localhost and the
	// path is what follows the socket file.
	URL *url.URL
	// Socket is the path of the UNIX socket file, or "" for TCP.
	Socket string
}

// Error is returned by Parse for a URL that no request can be sent to.
type Error struct {
	// URL is the URL as given to Parse, with any password redacted.
	URL string
	// Reason says what is wrong, without repeating the URL, for callers that
	// show the URL themselves.
	Reason string
}

// Error returns "endpointurl: bad endpoint URL <url>: <reason>".
func (e *Error) Error() string {
	return fmt.Sprintf("endpointurl: bad endpoint URL %q: %s", e.URL, e.Reason)
}

// Parse checks that raw is a URL a request can be sent to, without
// connecting, and returns its Target. It returns an *Error when it is not.
func Parse(raw string) (Target, error) {
	t, reason := parse(raw)
	if reason != "" {
		return Target{}, &Error{URL: Redact(raw), Reason: reason}
	}
	return t, nil
}

// Redact returns raw with any password replaced by "xxxxx", for error
// messages and logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

func parse(raw string) (Target, string) {
	if i := strings.IndexFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return Target{}, "it contains a space or control character"
	}
	if strings.ContainsAny(raw, "{}") {
		return Target{}, "it contains a brace, which no URL may hold"
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL, which Error already quotes.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Target{}, err.Error()
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" || u.Hostname() == "" {
			return Target{}, "want an absolute URL with a host, such as http://functions:8000/statefun"
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return Target{}, fmt.Sprintf("port %s is out of range; want 1 to 65535", p)
			}
		}
		return Target{URL: u}, ""
	case "http+unix", "https+unix":
		return unix(u)
	case "":
		return Target{}, "want an absolute URL, such as http://functions:8000/statefun"
	default:
		return Target{}, fmt.Sprintf("unsupported scheme %q; want http, https, http+unix or https+unix", u.Scheme)
	}
}

// unix splits a UNIX socket URL into the socket file and the request URL.
func unix(u *url.URL) (Target, string) {
	if u.Host != "" || u.User != nil {
		// Suggest the URL the author most likely meant: the host was meant
		// as the first directory of the socket path.
		fixed := *u
		fixed.User = nil
		if u.Host != "" {
			fixed.Path = "/" + u.Host + u.Path
			fixed.RawPath = ""
		}
		fixed.Host = ""
		authority := u.Host
		if u.User != nil {
			authority = u.User.Username() + "@" + u.Host
		}
		return Target{}, fmt.Sprintf("a %s URL has no host, but this one has %q: write three slashes, such as %s",
			u.Scheme, authority, fixed.String())
	}
	if u.Opaque != "" {
		return Target{}, fmt.Sprintf("a %s URL needs an absolute socket path, such as %s:///run/functions.sock/statefun", u.Scheme, u.Scheme)
	}
	// Split the escaped path so that an escaped "/" inside a component does
	// not count as a separator.
	escaped := u.EscapedPath()
	parts := strings.Split(escaped, "/")
	end := -1
	for i, p := range parts {
		name, err := url.PathUnescape(p)
		if err != nil {
			return Target{}, err.Error()
		}
		if strings.HasSuffix(name, ".sock") {
			end = i
			break
		}
	}
	if end < 0 {
		return Target{}, fmt.Sprintf("a %s URL names its socket file in the path, with a component ending in .sock, such as %s:///run/functions.sock/statefun",
			u.Scheme, u.Scheme)
	}
	socket, err := url.PathUnescape(strings.Join(parts[:end+1], "/"))
	if err != nil {
		return Target{}, err.Error()
	}
	rest := "/" + strings.Join(parts[end+1:], "/")
	path, err := url.PathUnescape(rest)
	if err != nil {
		return Target{}, err.Error()
	}
	r := *u
	r.Scheme = strings.TrimSuffix(u.Scheme, "+unix")
	r.Host = Localhost
	r.Path, r.RawPath = path, rest
	return Target{URL: &r, Socket: socket}, ""
}
