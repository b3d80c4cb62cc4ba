package stateclient

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// TypeName is a function type, "<namespace>/<type>" (e.g. example/person).
type TypeName struct {
	Namespace string
	Type      string
}

// ParseTypeName parses "<namespace>/<type>": exactly one '/', both parts
// non-empty (function typenames have no other '/'). The error wraps
// ErrInvalidAddress.
func ParseTypeName(s string) (TypeName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return TypeName{}, fmt.Errorf("%w: %q is not a function type <namespace>/<type>", ErrInvalidAddress, s)
	}
	return TypeName{Namespace: ns, Type: name}, nil
}

// String returns "namespace/type".
func (t TypeName) String() string { return t.Namespace + "/" + t.Type }

func (t TypeName) check() error {
	return checkSegments([]string{"namespace", "type"}, []string{t.Namespace, t.Type})
}

// Address is one function instance: a function type and an id. The id is an
// arbitrary UTF-8 string ('/', '%', spaces and emoji included).
type Address struct {
	Namespace string
	Type      string
	ID        string
}

// TypeName returns the address's function type.
func (a Address) TypeName() TypeName { return TypeName{Namespace: a.Namespace, Type: a.Type} }

// String returns "namespace/type/id", for messages only: the id may itself
// contain '/'.
func (a Address) String() string { return a.Namespace + "/" + a.Type + "/" + a.ID }

// segments returns the path segments of the address, then of state names.
func (a Address) segments(state ...string) []string {
	return append([]string{a.Namespace, a.Type, a.ID}, state...)
}

func (a Address) check(state ...string) error {
	names := []string{"namespace", "type", "id", "state name"}
	return checkSegments(names[:3+len(state)], a.segments(state...))
}

// Value is one entry as read by Get.
type Value struct {
	// Bytes is the body: the exact stored bytes when ContentType is
	// application/octet-stream, the value's text when it is text/plain.
	Bytes []byte
	// ContentType is the representation the server chose.
	ContentType string
	// Typename is the value's type, e.g. io.statefun.types/int.
	Typename string
	// Version is the entry's version (its ETag without quotes); it changes on
	// every write. Pass it as PutOptions.IfMatch.
	Version string
	// ExpiresAt is when the entry expires under its TTL; zero without one.
	ExpiresAt time.Time
}

// Envelope is the JSON representation of an entry, which every entry has:
// Value is the value as JSON when the type is a built-in scalar or the bytes
// are JSON, ValueBase64 the exact stored bytes. To write it back change one
// of the two (and drop the other, or the server requires them to agree).
type Envelope struct {
	Address  EnvelopeAddress `json:"address"`
	State    string          `json:"state"`
	Typename string          `json:"typename"`
	// Version is the entry's version; it is not a condition on a write.
	Version   string     `json:"version,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Value is nil when the value has no JSON form.
	Value json.RawMessage `json:"value,omitempty"`
	// ValueBase64 is the exact stored bytes, standard base64; "" is zero
	// bytes (e.g. int 0).
	ValueBase64 string `json:"valueBase64"`
}

// EnvelopeAddress is the function instance of an Envelope.
type EnvelopeAddress struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
}

// Ack is how far a mutation has gone when the server answers.
type Ack string

// The ack modes of a mutation; the zero Ack is the server's default,
// AckCommitted.
const (
	// AckCommitted answers once the mutation is applied and durably
	// committed.
	AckCommitted Ack = "committed"
	// AckApplied answers once the mutation is applied in mailbox order and
	// visible; a crash before the next commit can lose it.
	AckApplied Ack = "applied"
	// AckAccepted answers 202 once the mutation is validated and durably
	// queued; poll Receipt for the outcome.
	AckAccepted Ack = "accepted"
)

// PutOptions are the optional parts of a Put.
type PutOptions struct {
	// Typename sets Statefun-Type: the type to store the value as. Empty:
	// the type the function registered, else the existing value's.
	Typename string
	// IfMatch makes the write conditional on the entry's version (with or
	// without the quotes of an ETag).
	IfMatch string
	// IfNoneMatch makes the write conditional on the entry having no value.
	IfNoneMatch bool
	// Ack is when to answer; empty is AckCommitted.
	Ack Ack
	// Reason is recorded in the audit log (Statefun-Reason); one line.
	Reason string
}

// DeleteOptions are the optional parts of Delete and DeleteAddress.
type DeleteOptions struct {
	// IfMatch makes a Delete conditional on the entry's version; not
	// allowed for DeleteAddress.
	IfMatch string
	// Ack is when to answer; empty is AckCommitted.
	Ack Ack
	// Reason is recorded in the audit log (Statefun-Reason); one line.
	Reason string
}

// Receipt is the outcome of a mutation.
type Receipt struct {
	// Mutation is the mutation's id; Receipt and Revert take it.
	Mutation string `json:"mutation"`
	// Status is accepted, applied, committed, rejected or failed.
	Status string `json:"status"`
	// Checkpoint is the commit that carries the mutation; nil while accepted.
	Checkpoint *uint64 `json:"checkpoint"`
	// Version is the entry's new version ("" after a delete); for a rejected
	// mutation, the entry's current version.
	Version string `json:"version,omitempty"`
	// PreviousVersion is the version before the mutation ("" when there was
	// no value).
	PreviousVersion string `json:"previousVersion,omitempty"`
	// Reason says why a mutation was rejected or failed.
	Reason string `json:"reason,omitempty"`
	// Commit is the position of the commit that carries the mutation,
	// "<partition>.<commit id>" ("" while accepted): a read with
	// ?minCommit=<Commit> reflects at least this mutation.
	Commit string `json:"commit,omitempty"`
}

// Entries is the listing of one function instance.
type Entries struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	// Entries are the states that hold a value, by name.
	Entries []EntryInfo `json:"entries"`
	// Registered are the states the function type registered, with or
	// without a value.
	Registered []StateSpec `json:"registered"`
}

// EntryInfo describes one entry without its value.
type EntryInfo struct {
	State     string     `json:"state"`
	Typename  string     `json:"typename"`
	Size      int        `json:"size"`
	Version   string     `json:"version"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Registered says whether the function registered this state name; an
	// unregistered entry is left over from an older version of the function.
	Registered bool `json:"registered"`
}

// StateSpec is a state a function type registered (its ValueSpec).
type StateSpec struct {
	State    string `json:"state"`
	Typename string `json:"typename"`
	// Expiration is none, after-write or after-invoke.
	Expiration  string `json:"expiration"`
	ExpireAfter string `json:"expireAfter,omitempty"`
}

// IDPage is one page of ids.
type IDPage struct {
	IDs []string `json:"ids"`
	// Next is the after of the following page; "" on the last page.
	Next string `json:"next,omitempty"`
}

// Types lists function types.
type Types struct {
	Namespaces []string   `json:"namespaces"`
	Types      []TypeInfo `json:"types"`
	// MissingPartitions, in cluster mode, are the partitions no node
	// answered for in time: a type held only there may be missing.
	MissingPartitions []int `json:"missingPartitions,omitempty"`
}

// TypeInfo is one function type of a listing.
type TypeInfo struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	// Registered: the function declared states since the runtime started
	// (or before, as stored).
	Registered bool `json:"registered"`
	// HoldsState: some instance of the type holds durable state.
	HoldsState       bool `json:"holdsState"`
	RegisteredStates int  `json:"registeredStates"`
}

// AuditFilter selects audit records; zero fields do not filter.
type AuditFilter struct {
	Namespace, Type, ID, State string
	Principal                  string
	Mutation                   string
	// Since and Until bound the record's time (inclusive, millisecond
	// precision).
	Since, Until time.Time
	// Limit caps the records returned; 0 is the server's default of 1000.
	Limit int
}

// AuditRecord is one entry of the audit log: one state entry changed by one
// mutation.
type AuditRecord struct {
	Mutation  string    `json:"mutation"`
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Reason    string    `json:"reason,omitempty"`
	// Reverts names the mutation this one reverted.
	Reverts   string `json:"reverts,omitempty"`
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	State     string `json:"state"`
	// Op is put, delete or delete-all.
	Op string `json:"op"`
	// Before is the entry before the mutation; nil when it had no value.
	Before *AuditImage `json:"before"`
	// Version is the entry's version after the mutation; "" after a delete.
	Version  string `json:"version,omitempty"`
	Typename string `json:"typename,omitempty"`
	// Import and Line name the import and its line that wrote the entry
	// back (Import); empty for any other mutation.
	Import string `json:"import,omitempty"`
	Line   int64  `json:"line,omitempty"`
}

// AuditImage is an entry's value before a mutation.
type AuditImage struct {
	Typename string `json:"typename"`
	Version  string `json:"version"`
	// Value is the exact stored bytes (valueBase64 on the wire).
	Value []byte `json:"valueBase64"`
	// JSON is the value as JSON when its type has a JSON form (the
	// built-in scalar types, or bytes that are JSON); nil otherwise.
	JSON json.RawMessage `json:"value,omitempty"`
}
