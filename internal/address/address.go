// Package address names function types and function instances, and maps an
// instance to the partition that owns it.
package address

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
)

// TypeName is a StateFun typename, "<namespace>/<name>".
type TypeName struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (t TypeName) String() string { return t.Namespace + "/" + t.Name }

// IsZero reports whether t is the empty typename.
func (t TypeName) IsZero() bool { return t.Namespace == "" && t.Name == "" }

// ErrBadTypeName is returned by ParseTypeName when a string is not
// "<namespace>/<name>" with exactly one slash and both parts non-empty.
var ErrBadTypeName = errors.New("address: a typename is <namespace>/<name> with exactly one '/' and both parts non-empty")

// ParseTypeName parses "<namespace>/<name>" the way module.yaml and the Java
// runtime do: exactly one '/', both parts non-empty. (The SDKs are laxer and
// split at the last '/'; see ParseTypeNameLax.)
func ParseTypeName(s string) (TypeName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return TypeName{}, fmt.Errorf("%w: %q", ErrBadTypeName, s)
	}
	return TypeName{Namespace: ns, Name: name}, nil
}

// ParseTypeNameLax parses a typename the way the SDKs do: split at the last
// '/', both parts non-empty. Typenames of values (such as
// "type.googleapis.com/pkg.Msg") may contain more than one '/' in their
// namespace.
func ParseTypeNameLax(s string) (TypeName, error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || i == len(s)-1 {
		return TypeName{}, fmt.Errorf("%w: %q", ErrBadTypeName, s)
	}
	return TypeName{Namespace: s[:i], Name: s[i+1:]}, nil
}

// Address is one function instance: a function type and an id.
type Address struct {
	Type TypeName
	ID   string
}

// String returns "namespace/name/id"; for logs only (ids may contain '/').
func (a Address) String() string { return a.Type.String() + "/" + a.ID }

// Partition returns the partition of an instance id among n partitions.
//
// The hash is FNV-1a (64 bit) of the id's UTF-8 bytes, reduced mod n. It is
// part of the storage format: changing it would strand every stored entry in
// the wrong partition, so it never changes. Like StateFun, only the id is
// hashed: instances of different types with the same id share a partition,
// and so share a delayed-message and cancellation-token scope.
func Partition(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}
