package stateapi

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/privfile"
)

// Scopes a token can grant.
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
)

// Token is one bearer token of the state API.
type Token struct {
	// Name identifies the holder; it is the principal in the audit log.
	Name   string
	Secret string
	Scopes []string
}

// LoadTokens reads a token file: one token per line, "<name> <secret>
// <scope>[,<scope>]", blank lines and lines starting with '#' ignored.
//
// It refuses a file that group or others may write (on systems with Unix
// permissions): whoever can write it can grant themselves every scope. And
// it refuses two tokens with the same secret, because a request is then
// attributed to whichever comes first, and the audit log names the wrong
// principal. Errors are prefixed "stateapi: " and name the file and line.
func LoadTokens(path string) ([]Token, error) {
	f, err := privfile.Open(path)
	var we *privfile.WritableError
	if errors.As(err, &we) {
		return nil, fmt.Errorf("stateapi: token file %s is writable by its group or by others (mode %04o), so they could grant themselves access; run chmod 600 %s (or chmod 640 for a group that only reads it)",
			path, we.Mode, path)
	}
	if err != nil {
		return nil, fmt.Errorf("stateapi: token file: %w", err)
	}
	defer f.Close()
	var out []Token
	secretLine := make(map[string]int) // secret → line of its first token
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 {
			return nil, fmt.Errorf("stateapi: %s:%d: want \"<name> <secret> <scopes>\", got %d fields", path, line, len(f))
		}
		t := Token{Name: f[0], Secret: f[1], Scopes: strings.Split(f[2], ",")}
		for _, s := range t.Scopes {
			if s != ScopeRead && s != ScopeWrite {
				return nil, fmt.Errorf("stateapi: %s:%d: unknown scope %q (want read or write)", path, line, s)
			}
		}
		if !utf8.ValidString(t.Name) {
			// The name is the principal in the audit log, a protobuf string.
			return nil, fmt.Errorf("stateapi: %s:%d: the token name is not valid UTF-8", path, line)
		}
		if len(t.Secret) < 16 {
			return nil, fmt.Errorf("stateapi: %s:%d: the secret of %s is shorter than 16 characters", path, line, t.Name)
		}
		if first, dup := secretLine[t.Secret]; dup {
			return nil, fmt.Errorf("stateapi: %s:%d: token %s has the same secret as the token on line %d; give every token its own secret",
				path, line, t.Name, first)
		}
		secretLine[t.Secret] = line
		out = append(out, t)
	}
	return out, sc.Err()
}

// identify returns the caller's token, or writes 401 and returns false.
// Call it only when tokens are configured. A request another node signed
// (nodeauth.go) is the caller's that node vouched for.
func (s *Server) identify(w http.ResponseWriter, r *http.Request) (Token, bool) {
	if c, ok := r.Context().Value(nodeCallerKey{}).(trust.Caller); ok {
		t, why := s.nodeToken(c)
		if why != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="statefun", error="invalid_token"`)
			fail(w, r, http.StatusUnauthorized, why)
			return Token{}, false
		}
		return t, true
	}
	t, given, ok := s.bearer(r)
	if !ok {
		if !given {
			w.Header().Set("WWW-Authenticate", `Bearer realm="statefun"`)
			fail(w, r, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>)")
			return Token{}, false
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="statefun", error="invalid_token"`)
		fail(w, r, http.StatusUnauthorized, "unknown bearer token")
		return Token{}, false
	}
	return t, true
}

// bearer returns the token r's Authorization header names; given is false
// when it names none.
func (s *Server) bearer(r *http.Request) (t Token, given, ok bool) {
	// The scheme is case-insensitive (RFC 9110 11.1).
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	secret = strings.TrimSpace(secret)
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return Token{}, false, false
	}
	sum := sha256.Sum256([]byte(secret))
	for _, t := range s.tokens {
		want := sha256.Sum256([]byte(t.Secret))
		if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			return t, true, true
		}
	}
	return Token{}, true, false
}

// authorize returns the caller's principal, or writes 401/403 and returns
// false. Without tokens every caller is "anonymous" (the listener is then
// bound to loopback only).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, scope string) (string, bool) {
	if len(s.tokens) == 0 {
		return "anonymous", true
	}
	t, ok := s.identify(w, r)
	if !ok {
		return "", false
	}
	if !slices.Contains(t.Scopes, scope) {
		fail(w, r, http.StatusForbidden, fmt.Sprintf("token %s lacks the %s scope", t.Name, scope))
		return "", false
	}
	return t.Name, true
}
