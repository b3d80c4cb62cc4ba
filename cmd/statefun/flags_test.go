package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/internal/store"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"8MiB": 8 << 20, "512k": 512 << 10, "1G": 1 << 30, "4096": 4096, " 2 MB ": 2 << 20} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.5GiB", "x"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) succeeded", in)
		}
	}
}

// Store flags out of range are refused before anything starts, naming the
// flag.
func TestRunRefusesBadStoreFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--store-memtable-size 100KiB", "--store-memtable-size"},
		{"--disk-reserve lots", "--disk-reserve"},
		{"--egress-max 0", "--egress-max"},
		{"--audit-retention 0s", "--audit-retention"},
		{"--idempotency-max -2", "--idempotency-max"},
		{"--idempotency-retention 0s", "--idempotency-retention"},
		{"--dead-letter-max 0", "--dead-letter-max"},
		{"--dead-letter-max -2", "--dead-letter-max"},
		{"--dead-letter-retention 0s", "--dead-letter-retention"},
		{"--dead-letter-retention week", "dead-letter-retention"},
		{"--message-dead-letter-max 0", "--message-dead-letter-max"},
		{"--message-dead-letter-retention 0s", "--message-dead-letter-retention"},
	} {
		var stderr bytes.Buffer
		if code := run(strings.Fields(c.args), &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("run %s = %d, %q", c.args, code, stderr.String())
		}
	}
}

// The dead-letter retention flags and their environment variables reach
// store.Retention; the defaults are the store's; -1s and -1 keep records.
func TestDeadLetterRetentionFlags(t *testing.T) {
	parse := func(args ...string) *store.Retention {
		t.Helper()
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		ret := retentionFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if err := applyEnv(fs, processEnv()); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if err := checkRetention(ret); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return ret
	}
	if r := parse(); r.DeadLetterAge != store.DefaultDeadLetterAge || r.DeadLetterCount != store.DefaultDeadLetterCount ||
		r.MessageDeadLetterAge != store.DefaultMessageDeadLetterAge || r.MessageDeadLetterCount != store.DefaultMessageDeadLetterCount {
		t.Errorf("defaults: %v %d %v %d", r.DeadLetterAge, r.DeadLetterCount, r.MessageDeadLetterAge, r.MessageDeadLetterCount)
	}
	if r := parse("--message-dead-letter-retention", "48h", "--message-dead-letter-max", "7"); r.MessageDeadLetterAge != 48*time.Hour || r.MessageDeadLetterCount != 7 {
		t.Errorf("message dead-letter flags: %v %d", r.MessageDeadLetterAge, r.MessageDeadLetterCount)
	}
	if r := parse("--dead-letter-retention", "36h", "--dead-letter-max", "500"); r.DeadLetterAge != 36*time.Hour || r.DeadLetterCount != 500 {
		t.Errorf("flags: %v %d", r.DeadLetterAge, r.DeadLetterCount)
	}
	if r := parse("--dead-letter-retention", "-1s", "--dead-letter-max", "-1"); r.DeadLetterAge != -time.Second || r.DeadLetterCount != -1 {
		t.Errorf("keep: %v %d", r.DeadLetterAge, r.DeadLetterCount)
	}
	t.Setenv("STATEFUN_DEAD_LETTER_RETENTION", "48h")
	t.Setenv("STATEFUN_DEAD_LETTER_MAX", "7")
	if r := parse(); r.DeadLetterAge != 48*time.Hour || r.DeadLetterCount != 7 {
		t.Errorf("env: %v %d", r.DeadLetterAge, r.DeadLetterCount)
	}
	if r := parse("--dead-letter-max", "9"); r.DeadLetterCount != 9 || r.DeadLetterAge != 48*time.Hour {
		t.Errorf("a flag beats its env: %v %d", r.DeadLetterAge, r.DeadLetterCount)
	}
}

// A malformed environment variable is refused, naming it; and it is
// forgotten by the next run, which reports only its own environment.
func TestRunRefusesBadRetentionEnv(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"STATEFUN_DEAD_LETTER_MAX", "lots"},
		{"STATEFUN_DEAD_LETTER_RETENTION", "7d"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			var stderr bytes.Buffer
			if code := run([]string{"--data-dir", t.TempDir()}, &stderr); code != 2 || !strings.Contains(stderr.String(), c.name) {
				t.Errorf("%s=%s: exit %d, %q", c.name, c.value, code, stderr.String())
			}
		})
	}
	var stderr bytes.Buffer
	if code := run([]string{"--dead-letter-max", "0"}, &stderr); code != 2 || strings.Contains(stderr.String(), "STATEFUN_") || !strings.Contains(stderr.String(), "--dead-letter-max") {
		t.Errorf("the next run: exit %d, %q", code, stderr.String())
	}
}
