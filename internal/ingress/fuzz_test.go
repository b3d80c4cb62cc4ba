package ingress

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
)

// FuzzParse feeds the playground's request parser arbitrary methods, paths,
// Content-Types and bodies. It must never panic; a refusal is a 4xx with a
// reason; an accepted request yields an envelope that protobuf encodes (the
// store's check) and whose address and typename pass the shared
// validators. The seeds run as a normal test; to search further:
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 20s ./internal/ingress
func FuzzParse(f *testing.F) {
	for _, s := range []struct{ method, path, ct, body string }{
		{"PUT", "/example/greeter/a", "application/vnd.example/Greet", "hi"},
		{"POST", "/example/greeter/a%2Fb", "text/plain", ""},
		{"GET", "/example/greeter/a", "", ""},
		{"PUT", "/example/greeter/a", "application/vnd.example/\xff", "x"},
		{"PUT", "/example/greeter/a", "application/vnd.example/a b; charset=utf-8", "x"},
		{"PUT", "/example/greeter/" + strings.Repeat("x", address.MaxSegmentBytes+1), "", ""},
		{"PUT", "/example/greeter/%FF", "", ""},
		{"PUT", "/example/a%2Fb/x", "", ""},
		{"PUT", "/unserved/greeter/x", "", ""},
		{"PUT", "/example/greeter/%zz", "", ""},
		{"PUT", "/example/greeter/", "", ""},
		{"PUT", "/example/greeter/x", "", "a body over the limit of 16 bytes"},
	} {
		f.Add(s.method, s.path, s.ct, []byte(s.body))
	}
	p := &Playground{
		Admit: func(t address.TypeName) error {
			if t.Namespace == "unserved" {
				return errors.New("no endpoint")
			}
			return nil
		},
		MaxBody: func(string, string) int64 { return 16 },
	}
	f.Fuzz(func(t *testing.T, method, path, ct string, body []byte) {
		u, err := url.ParseRequestURI(path)
		if err != nil {
			return // Go's server refuses such a request line itself
		}
		r := &http.Request{Method: method, URL: u, Header: http.Header{}, Body: readCloser{bytes.NewReader(body)}}
		if ct != "" {
			r.Header["Content-Type"] = []string{ct}
		}
		env, status, err := p.parse(r)
		if err != nil {
			if status < 400 || status > 499 || env != nil || err.Error() == "" {
				t.Fatalf("refusal: status %d, env %v, err %v", status, env, err)
			}
			return
		}
		if method != http.MethodPut && method != http.MethodPost {
			t.Fatalf("method %q accepted", method)
		}
		if _, err := proto.Marshal(env); err != nil {
			t.Fatalf("accepted an envelope the store cannot encode: %v", err)
		}
		a := env.GetTarget()
		fn := address.TypeName{Namespace: a.GetNamespace(), Name: a.GetType()}
		if err := address.CheckAddress(address.Address{Type: fn, ID: a.GetId()}); err != nil {
			t.Fatalf("accepted an address the validators refuse: %v", err)
		}
		if err := address.CheckTypename(env.GetArgument().GetTypename()); err != nil {
			t.Fatalf("accepted a typename the validators refuse: %v", err)
		}
		if fn.Namespace == "unserved" {
			t.Fatalf("accepted a message to %s, which no endpoint serves", fn)
		}
		if len(env.GetArgument().GetValue()) > 16 {
			t.Fatal("accepted a body over the limit")
		}
	})
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }
