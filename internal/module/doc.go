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
// Null and empty documents are skipped, and so are keys this package does
// not know (StateFun ignores unknown properties too).
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
//   - The legacy single-document format (version "3.0", module.meta.type
//     remote), converted the way StateFun converts it: its endpoints become
//     io.statefun.endpoints.v1/http endpoints.
//
// Refused with an [Error] that wraps [ErrNotSupported]: the Kafka and Kinesis
// kinds (io.statefun.kafka.v1/ingress, io.statefun.kafka.v1/egress,
// io.statefun.kinesis.v1/ingress, io.statefun.kinesis.v1/egress), also when
// they come from a legacy file. Refused as errors: any other kind, legacy
// format versions other than 3.0, two bindings of the same function type or
// namespace, and anything StateFun would reject when it binds the module.
//
// Where this package is stricter than StateFun, it rejects files that would
// only fail later, at run time, in StateFun: zero timeouts of the async
// transport, a URL template with a placeholder other than {function.name},
// a pool_size below 1, duplicate mapping keys, and two playground components
// on one port.
//
// Parse and Load check the whole file and report every problem they find,
// each one an [*Error] that names the file, document, line, column and field.
package module
