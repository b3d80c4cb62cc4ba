package functions_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/functions"
)

// A namespace wildcard serves new types up to its bound and refuses the
// next one with an error that names the limit and the flag; types it took
// stay taken; an exact type and another wildcard are not counted against
// it; a type living in the store is admitted past the bound; a negative
// bound means none.
func TestWildcardAdmitsTypesUpToItsBound(t *testing.T) {
	mod := parse(t, `kind: io.statefun.endpoints.v2/http
spec:
  functions: a/*
  urlPathTemplate: http://127.0.0.1:1/
---
kind: io.statefun.endpoints.v2/http
spec:
  functions: b/*
  urlPathTemplate: http://127.0.0.1:1/
---
kind: io.statefun.endpoints.v2/http
spec:
  functions: a/exact
  urlPathTemplate: http://127.0.0.1:1/
`)
	r := newRouter(t, mod, functions.Options{MaxWildcardTypes: 3})
	for i := range 3 {
		if err := r.Admit(tn(fmt.Sprintf("a/t%d", i))); err != nil {
			t.Fatalf("type %d of 3: %v", i, err)
		}
	}
	err := r.Admit(tn("a/t3"))
	var limited interface{ Limited() bool }
	if !errors.Is(err, functions.ErrTooManyTypes) || !errors.As(err, &limited) || !limited.Limited() ||
		!strings.Contains(err.Error(), "a/t3") || !strings.Contains(err.Error(), "--max-wildcard-types") {
		t.Fatalf("the fourth type: %v; want ErrTooManyTypes naming it and the flag", err)
	}
	if err := r.Routable(tn("a/t3")); !errors.Is(err, functions.ErrTooManyTypes) {
		t.Errorf("Routable of the fourth type: %v", err)
	}
	for _, ok := range []string{"a/t0", "a/t2", "a/exact", "b/x", "b/y"} {
		if err := r.Admit(tn(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if err := r.Admit(tn("c/x")); !errors.Is(err, functions.ErrNoEndpoint) {
		t.Errorf("a type no endpoint serves: %v; want ErrNoEndpoint", err)
	}
	r.Admitted(tn("a/stored"))
	if err := r.Admit(tn("a/stored")); err != nil {
		t.Errorf("a type from the store, past the bound: %v", err)
	}
	if err := r.Admit(tn("a/t4")); !errors.Is(err, functions.ErrTooManyTypes) {
		t.Errorf("after a stored type: %v", err)
	}

	unbounded := newRouter(t, mod, functions.Options{MaxWildcardTypes: -1})
	for i := range 5000 {
		if err := unbounded.Admit(tn(fmt.Sprintf("a/t%d", i))); err != nil {
			t.Fatalf("without a bound, type %d: %v", i, err)
		}
	}
	if err := newRouter(t, mod, functions.Options{}).Admit(tn(fmt.Sprintf("a/t%d", functions.DefaultMaxWildcardTypes))); err != nil {
		t.Errorf("the default bound refused the first type: %v", err)
	}
}
