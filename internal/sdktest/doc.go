// Package sdktest provides remote function servers built with the official
// StateFun SDKs (Go v3.3.0 and JavaScript 3.3.0), and helpers to talk to
// them, for this runtime's end-to-end tests.
//
// # Servers
//
//   - StartFeatureServer: sdktest/features and sdktest/stateless, which
//     exercise every Go SDK feature, driven by the command language below.
//     It counts invocations per address, can hold a request in flight and
//     can inject HTTP 500s.
//   - StartCounterServer: sdktest/counter, a minimal function for crash
//     tests and benchmarks.
//   - StartJSServer: jsfn/counter and jsfn/echo from testdata/jsfn.
//
// The Go SDK functions run in the test process, on httptest servers.
// FeatureHandler and CounterHandler serve them on a listener of the test's
// own, for example one it closes and reopens on a fixed port. The SDK logs
// every registration and failed invocation through the standard log
// package; a test binary that wants quiet output calls
// log.SetOutput(io.Discard) in TestMain. The JavaScript SDK runs in a node
// child process.
//
// # Command language
//
// sdktest/features is driven by JSON messages of typename sdktest/Command
// (type Command), sent through an ingress or built with CommandValue.
// Results come back as records for the playground egress
// io.statefun.playground/egress, with value type
// io.statefun.playground/EgressRecord and JSON {"topic": ..., "payload": ...}.
//
// sdktest/features declares these states (the State constants;
// sdktest/stateless declares none, and fails set, clear and incr):
//
//	name       type                        expiration
//	b          io.statefun.types/bool
//	i32        io.statefun.types/int
//	i64        io.statefun.types/long
//	f32        io.statefun.types/float
//	f64        io.statefun.types/double
//	str        io.statefun.types/string
//	doc        sdktest/Doc (JSON Doc)
//	ttl_write  io.statefun.types/string    AFTER_WRITE  2000 ms (TTLWrite)
//	ttl_call   io.statefun.types/string    AFTER_INVOKE 3000 ms (TTLCall)
//
// Ops ("op" field, the Op constants):
//
//	set         write each state given in "values" ({"i32": 7, "doc": {...}, ...})
//	clear       remove the states listed in "states"; all states when empty
//	incr        add 1 to i64 (no value counts as 0)
//	report      egress a Report to "topic" (default "sdktest"), tagged "tag"
//	egress      egress {"topic": topic, "payload": payload}
//	send        send "command" (a nested Command), or else "text" as an
//	            io.statefun.types/string, to "to": {"fn": typename, "id": id};
//	            an empty fn or id means the sender's own
//	send_after  the same as send, delayed "delay_ms"; with "token" it uses
//	            SendAfterWithCancellationToken
//	cancel      CancelDelayedMessage("token")
//	seq         run "commands" in order (nesting up to 32 deep)
//	fail        return an error, so the SDK answers HTTP 500
//
// A Report carries the reporting address ("self", "namespace/type/id"), the
// caller ("caller": "namespace/type/id", or null when Context.Caller() was
// nil), the typename of the message being handled, how many messages this
// address has handled in this server ("calls", not state), and
// every state value under "states" (a state with no value is left out).
// A message that is not a Command, such as a string, is answered with a
// Report (empty tag, "arg_text" holding the string).
//
// Example: set two states, then report them, in one message to
// sdktest/features/a from an ingress:
//
//	{"op": "seq", "commands": [
//	  {"op": "set", "values": {"i32": 7, "str": "x"}},
//	  {"op": "report", "tag": "after-set"}]}
//
// egresses {"topic": "sdktest", "payload": "{\"tag\":\"after-set\",
// \"self\":\"sdktest/features/a\",\"caller\":null,...,\"states\":{\"i32\":7,
// \"str\":\"x\"}}"}.
//
// Example: a delayed report to b, cancellable with token "t1":
//
//	{"op": "send_after", "to": {"id": "b"}, "delay_ms": 500, "token": "t1",
//	 "command": {"op": "report", "tag": "late"}}
//
// followed later by {"op": "cancel", "token": "t1"} sent to the same
// sender (tokens belong to the sender's id).
package sdktest
