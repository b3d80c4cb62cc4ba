package sdktest

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Function types served with the official Go SDK.
const (
	// FeaturesFn is the function that runs commands and owns every state.
	FeaturesFn = "sdktest/features"
	// StatelessFn runs the same commands as FeaturesFn but declares no
	// state; a report from it has every state nil.
	StatelessFn = "sdktest/stateless"
	// CounterFn counts every message it gets in the state CounterState.
	CounterFn = "sdktest/counter"
)

// Typenames of values exchanged with the functions.
const (
	// CommandType is the typename of a JSON Command.
	CommandType = "sdktest/Command"
	// DocType is the typename of the JSON state StateDoc.
	DocType = "sdktest/Doc"
	// EgressRecordType is the playground egress record (JSON EgressRecord).
	EgressRecordType = "io.statefun.playground/EgressRecord"
	// PlaygroundEgress is the egress every record is sent to.
	PlaygroundEgress = "io.statefun.playground/egress"
)

// Topics the functions write to unless a command names another one.
const (
	// DefaultTopic receives reports and egress commands without a topic.
	DefaultTopic = "sdktest"
	// CounterTopic receives one record per CounterFn message.
	CounterTopic = "counter"
)

// State names of FeaturesFn, with the StateFun type of each.
const (
	StateBool     = "b"         // io.statefun.types/bool
	StateInt32    = "i32"       // io.statefun.types/int
	StateInt64    = "i64"       // io.statefun.types/long
	StateFloat32  = "f32"       // io.statefun.types/float
	StateFloat64  = "f64"       // io.statefun.types/double
	StateString   = "str"       // io.statefun.types/string
	StateDoc      = "doc"       // sdktest/Doc (JSON)
	StateTTLWrite = "ttl_write" // io.statefun.types/string, expires TTLWrite after a write
	StateTTLCall  = "ttl_call"  // io.statefun.types/string, expires TTLCall after a call

	// CounterState is CounterFn's only state, an io.statefun.types/long.
	CounterState = "count"
)

// Expiration of the TTL states of FeaturesFn.
const (
	TTLWrite = 2 * time.Second // StateTTLWrite, mode AFTER_WRITE
	TTLCall  = 3 * time.Second // StateTTLCall, mode AFTER_INVOKE
)

// Ops of a Command.
const (
	OpSet       = "set"        // write every non-nil field of Values
	OpClear     = "clear"      // remove the states named in States, or all when empty
	OpIncr      = "incr"       // add 1 to StateInt64 (absent counts as 0)
	OpReport    = "report"     // egress a Report to Topic
	OpEgress    = "egress"     // egress an EgressRecord{Topic, Payload}
	OpSend      = "send"       // send Command (or Text) to To
	OpSendAfter = "send_after" // the same after DelayMs, with Token when set
	OpCancel    = "cancel"     // cancel the delayed message with Token
	OpSeq       = "seq"        // run Commands in order
	OpFail      = "fail"       // return an error: the SDK answers HTTP 500
	// OpFailUnlessFixed returns an error until Fix(Tag) is called: a
	// poisoned message, and the function's fix.
	OpFailUnlessFixed = "fail_unless_fixed"
)

// fixed holds the tags Fix was called with (the functions run in the test
// process, beside the test that fixes them).
var fixed sync.Map

// Fix makes the OpFailUnlessFixed commands tagged tag succeed from now
// on, as a redeployed function would.
func Fix(tag string) { fixed.Store(tag, true) }

// Command is one instruction for FeaturesFn or StatelessFn, sent as JSON
// with typename CommandType. Fields that an Op does not use are ignored.
type Command struct {
	Op string `json:"op"`
	// Tag is copied into the Report of OpReport, to tell reports apart.
	Tag string `json:"tag,omitempty"`

	// Values is what OpSet writes.
	Values *States `json:"values,omitempty"`
	// States names the states OpClear removes; empty means every state.
	States []string `json:"states,omitempty"`

	// Topic is the egress topic of OpReport and OpEgress; empty means
	// DefaultTopic.
	Topic string `json:"topic,omitempty"`
	// Payload is the record payload of OpEgress.
	Payload string `json:"payload,omitempty"`

	// To is the target of OpSend and OpSendAfter; nil means the function
	// itself.
	To *Target `json:"to,omitempty"`
	// Command is the message sent by OpSend and OpSendAfter. When nil,
	// Text is sent instead as an io.statefun.types/string.
	Command *Command `json:"command,omitempty"`
	Text    string   `json:"text,omitempty"`
	// DelayMs is the delay of OpSendAfter in milliseconds.
	DelayMs int64 `json:"delay_ms,omitempty"`
	// Token is the cancellation token of OpSendAfter (optional) and
	// OpCancel (required).
	Token string `json:"token,omitempty"`

	// Commands is the body of OpSeq.
	Commands []Command `json:"commands,omitempty"`
}

// Target names the receiver of a sent message.
type Target struct {
	// Fn is the function typename; empty means the sender's own type.
	Fn string `json:"fn,omitempty"`
	// ID is the target id; empty means the sender's own id.
	ID string `json:"id,omitempty"`
}

// States holds one optional value per state of FeaturesFn. A nil field is
// "leave alone" in an OpSet and "no value" in a Report.
type States struct {
	Bool     *bool    `json:"b,omitempty"`
	Int32    *int32   `json:"i32,omitempty"`
	Int64    *int64   `json:"i64,omitempty"`
	Float32  *float32 `json:"f32,omitempty"`
	Float64  *float64 `json:"f64,omitempty"`
	String   *string  `json:"str,omitempty"`
	Doc      *Doc     `json:"doc,omitempty"`
	TTLWrite *string  `json:"ttl_write,omitempty"`
	TTLCall  *string  `json:"ttl_call,omitempty"`
}

// Doc is the JSON state StateDoc.
type Doc struct {
	Name string   `json:"name"`
	Tags []string `json:"tags,omitempty"`
	N    int64    `json:"n"`
}

// Report is what OpReport egresses, JSON-encoded as the Payload of an
// EgressRecord. Any message that is not a Command is answered with a
// Report as well (with an empty Tag).
type Report struct {
	Tag string `json:"tag,omitempty"`
	// Self is the reporting address as "namespace/type/id".
	Self string `json:"self"`
	// Caller is the caller's address as "namespace/type/id", or nil when
	// the SDK's Context.Caller() was nil (a message from an ingress).
	Caller *string `json:"caller"`
	// ArgType is the typename of the message being handled, and ArgText its
	// value when that is an io.statefun.types/string.
	ArgType string `json:"arg_type"`
	ArgText string `json:"arg_text,omitempty"`
	// Calls is how many messages this address has handled in this
	// FeatureHandler, this one included. It is not state: a new handler
	// (a new FeatureServer) starts again at 0.
	Calls int64 `json:"calls"`
	// States is every state as the function read it.
	States States `json:"states"`
}

// EgressRecord is the value of a record for PlaygroundEgress.
type EgressRecord struct {
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
}

// Report reads the Report carried by the record's payload. It returns an
// error when the payload is not a JSON Report, for example a record of
// OpEgress or of CounterFn.
func (r EgressRecord) Report() (Report, error) {
	var rep Report
	if err := json.Unmarshal([]byte(r.Payload), &rep); err != nil {
		return Report{}, fmt.Errorf("sdktest: record on topic %q is not a report: %w", r.Topic, err)
	}
	return rep, nil
}
