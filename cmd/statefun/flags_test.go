package main

import (
	"bytes"
	"strings"
	"testing"
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
	} {
		var stderr bytes.Buffer
		if code := run(strings.Fields(c.args), &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("run %s = %d, %q", c.args, code, stderr.String())
		}
	}
}
