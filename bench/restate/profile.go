package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// area is a share of our runtime's CPU: a sample is in it when any frame
// of its stack is a function whose name contains one of the patterns.
type area struct {
	name     string
	patterns []string
}

const ours = "github.com/statefun-go/statefun/internal/"

// parts divide the runtime's CPU by what the work was for: each sample
// goes to the first part that matches it, so the shares add up to 100%.
// The order puts a goroutine's purpose before what it calls (the ingress
// handler's commit wait is ingress work; a committer's Pebble calls are
// commit work).
var parts = []area{
	{"playground ingress requests (HTTP server + handler)", []string{ours + "ingress."}},
	{"state API requests", []string{ours + "stateapi."}},
	{"/metrics scrapes (the harness polls them)", []string{"prometheus/client_golang/prometheus/promhttp"}},
	{"calls to the function (invoker, HTTP client, protobuf)", []string{ours + "engine/dispatch.", ours + "invoker.", "net/http.(*persistConn)"}},
	{"group commits (engine committer, Pebble batch + commit)", []string{ours + "engine/committer."}},
	{"partition cores (engine loop, state reads)", []string{ours + "engine.(*part)", ours + "partition."}},
	{"other HTTP server work (reading requests, writing answers)", []string{"net/http.(*conn).serve"}},
	{"Pebble background (WAL writer + fsync, flushes, compactions)", []string{"github.com/cockroachdb/pebble"}},
	{"Go garbage collector (background workers)", []string{"runtime.gcBgMarkWorker"}},
}

// otherPart names what matches no part: the Go scheduler, timers, netpoll.
const otherPart = "other (Go scheduler, timers, network poller)"

// aspects cut across the parts; a sample can be in several.
var aspects = []area{
	{"system calls (socket reads and writes, fsync)", []string{"syscall.", "internal/runtime/syscall."}},
	{"memory allocation (mallocgc)", []string{"runtime.mallocgc"}},
	{"protobuf encode/decode", []string{"google.golang.org/protobuf/"}},
	{"goroutine stack growth (newstack)", []string{"runtime.newstack"}},
	{"JSON", []string{"encoding/json."}},
}

// profileSummary is what a CPU profile of our runtime says.
type profileSummary struct {
	path    string
	seconds float64   // CPU seconds sampled
	wall    float64   // seconds profiled
	part    []float64 // share of each of parts, then of otherPart
	aspect  []float64 // share of each of aspects
	top     []fnShare
}

type fnShare struct {
	name string
	flat float64 // share of samples with the function as leaf
}

func summarize(path string) (*profileSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	vi := len(p.SampleType) - 1 // cpu nanoseconds
	s := &profileSummary{path: path, wall: float64(p.DurationNanos) / 1e9,
		part: make([]float64, len(parts)+1), aspect: make([]float64, len(aspects))}
	var total float64
	flat := map[string]float64{}
	for _, smp := range p.Sample {
		v := float64(smp.Value[vi])
		total += v
		var names []string
		for _, loc := range smp.Location {
			for _, line := range loc.Line {
				if line.Function != nil {
					names = append(names, line.Function.Name)
				}
			}
		}
		if len(names) > 0 {
			flat[names[0]] += v
		}
		in := func(a area) bool {
			for _, n := range names {
				for _, pat := range a.patterns {
					if strings.Contains(n, pat) {
						return true
					}
				}
			}
			return false
		}
		pi := len(parts)
		for i, a := range parts {
			if in(a) {
				pi = i
				break
			}
		}
		s.part[pi] += v
		for i, a := range aspects {
			if in(a) {
				s.aspect[i] += v
			}
		}
	}
	if total == 0 {
		return s, nil
	}
	s.seconds = total / 1e9
	for i := range s.part {
		s.part[i] /= total
	}
	for i := range s.aspect {
		s.aspect[i] /= total
	}
	for name, v := range flat {
		s.top = append(s.top, fnShare{name, v / total})
	}
	slices.SortFunc(s.top, func(a, b fnShare) int {
		switch {
		case a.flat > b.flat:
			return -1
		case a.flat < b.flat:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	s.top = s.top[:min(len(s.top), 12)]
	return s, nil
}

// profileSection is the report's account of our runtime's CPU profile.
func profileSection(o options, res *results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	run := res.Ours.Profiled
	if run == nil {
		return ""
	}
	s, err := summarize(run.Profile)
	if err != nil {
		return fmt.Sprintf("(profile %s unreadable: %v)\n\n", run.Profile, err)
	}
	p("### Where our runtime's CPU goes (pprof)\n\n")
	p("A CPU profile of the runtime process over an extra increment run after workloads 1-3 (not in the table: profiling slows the runtime, to %.0f increments/s here): %d increments over %s. The function and the load generator are other processes. Read it with `go tool pprof -top bench/restate/%s/%s`.\n\n",
		run.AppliedRate(), run.Ack.OK, plural(slices.Max(o.cfg.Keys), "key"), filepath.Base(o.cfg.ProfileDir), filepath.Base(run.Profile))
	p("%.1f CPU seconds sampled over %.1f s (%.2f cores), %.0f µs of runtime CPU per increment.\n\n", s.seconds, s.wall, s.seconds/s.wall, 1e6*s.seconds/float64(max(run.Ack.OK, 1)))
	p("| what the runtime's CPU did | share |\n|---|--:|\n")
	for i, a := range parts {
		p("| %s | %.0f%% |\n", a.name, 100*s.part[i])
	}
	p("| %s | %.0f%% |\n", otherPart, 100*s.part[len(parts)])
	p("\nAcross those (overlapping): ")
	var cross []string
	for i, a := range aspects {
		cross = append(cross, fmt.Sprintf("%s %.0f%%", a.name, 100*s.aspect[i]))
	}
	p("%s.\n\nTop functions by own CPU: ", strings.Join(cross, ", "))
	var tops []string
	for _, f := range s.top {
		tops = append(tops, fmt.Sprintf("`%s` %.1f%%", shortFn(f.name), 100*f.flat))
	}
	p("%s.\n\n", strings.Join(tops, ", "))
	return b.String()
}

// shortFn drops the module path of our own functions.
func shortFn(name string) string {
	return strings.TrimPrefix(name, "github.com/statefun-go/statefun/")
}
