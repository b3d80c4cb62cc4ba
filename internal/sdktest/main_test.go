package sdktest

import (
	"io"
	"log"
	"testing"
)

func TestMain(m *testing.M) {
	// The official Go SDK logs every registration, missing state and failed
	// invocation through the log package.
	log.SetOutput(io.Discard)
	m.Run()
}
