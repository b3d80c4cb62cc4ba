// Package address names function types and function instances, and maps an
// instance to the partition that owns it.
package address

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"
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

// MaxSegmentBytes is the most bytes one part of an address may have: a
// namespace, a function name or an id (and, in the state API, a state
// name). Every edge that accepts an address checks it with the validators
// below, so anything stored can also be read, repaired and deleted through
// the state API, whose paths carry the same parts.
const MaxSegmentBytes = 4096

// MaxTypenameBytes is the most bytes a value's typename may have.
const MaxTypenameBytes = 4096

// ErrBadAddress is matched (errors.Is) by the *FieldError the validators
// below return when a field could not be stored, encoded or addressed later.
var ErrBadAddress = errors.New("address: invalid field")

// FieldError is a field that failed validation: Field names it ("id",
// "namespace", "typename", ...), Problem says what is wrong, so an edge can
// answer with its own prefix.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return "address: " + e.Field + " " + e.Problem }

// Is makes a FieldError match ErrBadAddress.
func (e *FieldError) Is(target error) bool { return target == ErrBadAddress }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// CheckSegment checks one part of an address or a state name: non-empty,
// valid UTF-8 (protobuf refuses to encode anything else) and at most
// MaxSegmentBytes. field names the part in the error.
func CheckSegment(field, s string) error {
	switch {
	case s == "":
		return fieldErr(field, "is empty")
	case len(s) > MaxSegmentBytes:
		return fieldErr(field, "is %d bytes, over the limit of %d", len(s), MaxSegmentBytes)
	case !utf8.ValidString(s):
		return fieldErr(field, "is not valid UTF-8")
	}
	return nil
}

// CheckID checks an instance id. Any UTF-8 is allowed (also '/' and
// control characters, which the state API can address percent-encoded),
// but "." and "..", which a URL path cannot carry as a segment: clients
// and browsers resolve them away, so such an address could never be
// opened or repaired (see IsDotSegment).
func CheckID(id string) error {
	if err := CheckSegment("id", id); err != nil {
		return err
	}
	if IsDotSegment(id) {
		return fieldErr("id", "%q is a dot segment, which a URL path cannot carry", id)
	}
	return nil
}

// IsDotSegment reports whether s is "." or "..": a path segment that URL
// clients resolve away (RFC 3986 §5.2.4), even when sent as %2E.
func IsDotSegment(s string) bool { return s == "." || s == ".." }

// CheckStateName checks the name of a state, as a function declares it.
func CheckStateName(name string) error { return CheckSegment("state name", name) }

// CheckFunctionType checks a function type: both parts valid segments,
// without '/' (module.yaml could never name such a type) and without
// control characters (they end up in logs and metric labels).
func CheckFunctionType(t TypeName) error {
	for _, p := range [2]struct{ field, s string }{{"namespace", t.Namespace}, {"function name", t.Name}} {
		if err := CheckSegment(p.field, p.s); err != nil {
			return err
		}
		if strings.ContainsRune(p.s, '/') {
			return fieldErr(p.field, "%q contains '/'", p.s)
		}
		if IsDotSegment(p.s) {
			return fieldErr(p.field, "%q is a dot segment, which a URL path cannot carry", p.s)
		}
		if i := strings.IndexFunc(p.s, unicode.IsControl); i >= 0 {
			return fieldErr(p.field, "contains the control character %U", []rune(p.s[i:])[0])
		}
	}
	return nil
}

// CheckAddress checks a function type and an id.
func CheckAddress(a Address) error {
	if err := CheckFunctionType(a.Type); err != nil {
		return err
	}
	return CheckID(a.ID)
}

// CheckTypename checks a value's typename: valid UTF-8, at most
// MaxTypenameBytes, no control characters or spaces, and of the shape
// <namespace>/<name> as the SDKs parse it (split at the last '/').
func CheckTypename(s string) error {
	switch {
	case len(s) > MaxTypenameBytes:
		return fieldErr("typename", "is %d bytes, over the limit of %d", len(s), MaxTypenameBytes)
	case !utf8.ValidString(s):
		return fieldErr("typename", "is not valid UTF-8")
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }); i >= 0 {
		return fieldErr("typename", "contains the character %U", []rune(s[i:])[0])
	}
	if _, err := ParseTypeNameLax(s); err != nil {
		return fieldErr("typename", "%q is not <namespace>/<name>", s)
	}
	return nil
}
