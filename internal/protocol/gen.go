// Package protocol holds the StateFun request-reply messages, the built-in
// type wrappers and the runtime's own stored records, generated from the
// .proto files beside this file.
//
// Regenerate with `go generate ./internal/protocol` (needs protoc and
// protoc-gen-go on PATH); the generated files are committed.
package protocol

//go:generate protoc --go_out=.. --go_opt=paths=source_relative -I.. protocol/requestreply.proto protocol/types.proto protocol/stored.proto protocol/history.proto
//go:generate protoc --go_out=.. --go_opt=paths=source_relative -I.. protocol/pause.proto

// The .proto files are registered under "protocol/…" rather than bare names
// so that they can share a binary with the official Go SDK, which registers
// its own "request-reply.proto" and "types.proto".
