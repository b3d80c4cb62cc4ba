package main

import (
	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/apptest"
	"io"
	"log"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	log.SetOutput(io.Discard) // the official SDK logs every negotiation
	os.Exit(m.Run())
}

// runtime is the in-process runtime the CLI tests talk to; the CLI helpers
// (cli, ok, ...) hang off it.
type runtime struct{ *apptest.Runtime }

func startRuntime(t *testing.T, opts ...func(*app.Config)) *runtime {
	return &runtime{apptest.Start(t, opts...)}
}
