package main

import (
	"strings"
	"testing"
)

// TestRunRefusesBadAllowedHostsAndOrigins: the allowed hosts and origins
// of the API and of the playground listeners are checked before anything
// starts, and the error names them and their flag.
func TestRunRefusesBadAllowedHostsAndOrigins(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{[]string{"--api-allowed-origins", "console.example"}, [2]string{}, `allowed origin "console.example"`},
		{[]string{"--api-allowed-hosts", "http://box/"}, [2]string{}, `allowed host "http://box/"`},
		{nil, [2]string{"STATEFUN_API_ALLOWED_ORIGINS", "https://ok.example, https://bad.example/x"}, `allowed origin "https://bad.example/x"`},
		{[]string{"--playground-allowed-hosts", "ok.example,http://box/"}, [2]string{}, `allowed host "http://box/" in --playground-allowed-hosts`},
		{nil, [2]string{"STATEFUN_PLAYGROUND_ALLOWED_ORIGINS", "statefun:8090"}, `allowed origin "statefun:8090" in --playground-allowed-origins`},
		{[]string{"--pause-after", "ns/type=0"}, [2]string{}, `--pause-after rule "ns/type=0"`},
		{nil, [2]string{"STATEFUN_PAUSE_AFTER", "ns=3"}, `--pause-after rule "ns=3"`},
		{[]string{"--timer-window", "0"}, [2]string{}, `--timer-window 0: want at least 1`},
	} {
		t.Run(c.want, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			var stderr strings.Builder
			args := append([]string{"--module", "does-not-exist.yaml", "--data-dir", t.TempDir()}, c.args...)
			if code := run(args, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("%q %v: exit %d, %s", c.args, c.env, code, stderr.String())
			}
		})
	}
}

func TestSplitList(t *testing.T) {
	if got := splitList(" a, b:1,,c "); strings.Join(got, "|") != "a|b:1|c" {
		t.Errorf("%q", got)
	}
	if got := splitList(""); got != nil {
		t.Errorf("%q", got)
	}
}

// --kafka-egress-reset-marker and its environment variable are parsed
// before anything starts; a malformed value exits 2 naming the flag or the
// variable.
func TestRunRefusesBadResetMarker(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--kafka-egress-reset-marker", "kc/out"}, "", "kafka-egress-reset-marker"},
		{[]string{"--kafka-egress-reset-marker", "kc/out=abc"}, "", "want <store>@<position>"},
		{[]string{"--kafka-egress-reset-marker", "kc/out=a@1", "--kafka-egress-reset-marker", "kc/out=b@2"}, "", "named twice"},
		{nil, "kc/out=abc@x", "STATEFUN_KAFKA_EGRESS_RESET_MARKER"},
	} {
		if c.env != "" {
			t.Setenv("STATEFUN_KAFKA_EGRESS_RESET_MARKER", c.env)
		}
		var stderr strings.Builder
		args := append([]string{"--module", "does-not-exist.yaml", "--data-dir", t.TempDir()}, c.args...)
		if code := run(args, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q %q: exit %d, %s", c.args, c.env, code, stderr.String())
		}
	}
	m := resetMarkers{}
	if err := m.Set("kc/out=none@5"); err != nil || m["kc/out"].Position != 5 || m["kc/out"].Store != "" {
		t.Errorf("Set: %v %v", m, err)
	}
}
