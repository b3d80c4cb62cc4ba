// Package module loads and validates a StateFun module.yaml: the file that
// binds function types to HTTP endpoints and declares ingresses and egresses.
//
// A file is a YAML stream of documents separated by "---". Each document is
// one component with a kind and a spec:
//
//	kind: io.statefun.endpoints.v2/http
//	spec:
//	  functions: example/*
//	  urlPathTemplate: http://functions:8000/statefun
//
// Null and empty documents are skipped. A module without components (an
// empty file, only comments or "---", a legacy module with empty lists) is
// refused: a file that loads as nothing is almost always the wrong file. A
// module with playground components but no endpoint loads with a warning:
// it can deliver no message, but the state API can still serve the state
// of function types that left the module.
//
// Unknown keys: StateFun ignores keys it does not know, so real files may
// carry extra ones and refusing them all would break files StateFun loads.
// But an ignored misspelling silently drops a setting. So a key that is a
// near miss of a key known at its place (the same up to case, '_' and '-',
// or within a small edit distance) is an error with a suggestion:
//
//	module.yaml:3:3: document 1 (io.statefun.endpoints.v2/http): spec.functons: unknown field "functons"; did you mean "functions"?
//
// Any other unknown key is ignored, as in StateFun, and listed in
// Module.Warnings with its position, for the caller to log.
//
// Endpoint URLs follow package endpointurl, the rule the invoker applies
// too: whatever loads can be called. http+unix://host/... (a host in a UNIX
// socket URL, which StateFun silently ignores) is refused with the
// three-slash URL it most likely meant.
//
// TLS files of the async transport (trust_cacerts, client_cert,
// client_key) are paths or file: URLs (file:/etc/ca.pem, as StateFun's own
// smoke test writes them); relative paths are relative to the working
// directory, as in StateFun. classpath: resources, other schemes and remote
// file hosts are refused, and so is client_key_password: encrypted keys are
// not supported. Parse checks the locations only and does no I/O; Load also
// reads the files, so that a missing file, one without a PEM certificate, or
// a key that does not match its certificate is reported at the field.
//
// Supported kinds:
//
//   - io.statefun.endpoints.v2/http, with an optional transport of type
//     io.statefun.transports.v1/async (the default) or
//     io.statefun.transports.v1/okhttp.
//   - io.statefun.endpoints.v1/http, which always uses okhttp semantics.
//   - io.statefun.playground.v1/ingress and io.statefun.playground.v1/egress,
//     the HTTP ingress and egress of the StateFun playground image. At most
//     one of each: their ids are fixed.
//   - io.statefun.kafka.v1/ingress and io.statefun.kafka.v1/egress, read
//     field by field as StateFun reads them (see [KafkaIngress] and
//     [KafkaEgress]); their client properties are kept with their positions
//     and checked by the Kafka client package.
//   - The legacy single-document format (version "3.0", module.meta.type
//     remote), converted the way StateFun converts it: its endpoints become
//     io.statefun.endpoints.v1/http endpoints, and its Kafka ingresses and
//     egresses become Kafka components whose id is their meta.id.
//
// Refused with an [Error] that wraps [ErrNotSupported]: the Kinesis kinds
// (io.statefun.kinesis.v1/ingress, io.statefun.kinesis.v1/egress), also
// when they come from a legacy file. Refused as errors: any other kind, legacy
// format versions other than 3.0, two bindings of the same function type or
// namespace, and anything StateFun would reject when it binds the module.
//
// Where this package is stricter than StateFun, it rejects files that would
// only fail later, at run time, in StateFun: zero timeouts of the async
// transport, a URL template with a placeholder other than {function.name},
// a pool_size below 1, duplicate mapping keys, two playground components
// on one port, and merge keys (<<) that merge a mapping into itself. For
// Kafka: a topic listed twice or without targets, a property list item
// with more than one key, a property set twice, an invalid topic or broker
// address, and a transaction timeout Kafka cannot take.
//
// Parse and Load check the whole file and report every problem they find,
// each one an [*Error] that names the file, document, line, column and field.
package module
