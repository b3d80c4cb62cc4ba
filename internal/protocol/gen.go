// Package protocol holds the StateFun request-reply messages, the built-in
// type wrappers and the runtime's own stored records, generated from the
// .proto files beside this file.
//
// Regenerate with `go generate ./internal/protocol` (needs protoc and
// protoc-gen-go on PATH); the generated files are committed.
package protocol

//go:generate protoc --go_out=. --go_opt=paths=source_relative -I. requestreply.proto types.proto stored.proto
