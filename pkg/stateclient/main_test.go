package stateclient_test

import (
	"io"
	"log"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	log.SetOutput(io.Discard) // the official SDK logs every negotiation
	os.Exit(m.Run())
}
