package engine

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
)

// ParsePauseAfter reads the poison policy of `statefun run --pause-after`:
// comma-separated rules "<pattern>=<attempts>", where a pattern is a
// function type "ns/name", every type of a namespace "ns/*", or every
// type "*". The most specific rule of a type applies; a type no rule
// names is retried until it succeeds, as without the flag. The result is
// Options.PauseAfter; "" gives nil.
func ParsePauseAfter(spec string) (func(t address.TypeName) int, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	exact := map[address.TypeName]int{}
	byNS := map[string]int{}
	all := 0
	for _, rule := range strings.Split(spec, ",") {
		rule = strings.TrimSpace(rule)
		pat, n, ok := strings.Cut(rule, "=")
		attempts, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || err != nil || attempts < 1 {
			return nil, fmt.Errorf("engine: --pause-after rule %q: want <namespace>/<name>=<attempts>, <namespace>/*=<attempts> or *=<attempts>, attempts at least 1", rule)
		}
		pat = strings.TrimSpace(pat)
		if pat == "*" {
			all = attempts
			continue
		}
		ns, name, ok := strings.Cut(pat, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") || strings.Contains(ns, "*") || (strings.Contains(name, "*") && name != "*") {
			return nil, fmt.Errorf("engine: --pause-after rule %q: the pattern must be <namespace>/<name>, <namespace>/* or *", rule)
		}
		if name == "*" {
			byNS[ns] = attempts
		} else {
			exact[address.TypeName{Namespace: ns, Name: name}] = attempts
		}
	}
	return func(t address.TypeName) int {
		if n, ok := exact[t]; ok {
			return n
		}
		if n, ok := byNS[t.Namespace]; ok {
			return n
		}
		return all
	}, nil
}
