package main

// `statefun state export` and `statefun state import`: the state of a
// running application as JSON lines, and back (docs/how-to/export-import.md).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// exportCmd writes entries as JSON lines.
func (c *stateCLI) exportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export [--type <ns>/<type>] [--prefix P] [--state S] > state.jsonl",
		Short: "Write state entries to stdout, one JSON line each",
		Long: `Writes the state entries of every function type holding state (or of --type)
to stdout, one JSON object per line: the entry's address, state name, typename,
version and value ("value" as JSON where the type has a JSON form, else
"valueBase64" with the exact bytes) — the envelope a GET answers. It reads page
by page while the application runs; each page is one consistent read, and an
entry that holds a value through the whole export is written exactly once. The
count goes to stderr at the end. "statefun state import" writes the lines back.`,
	}
	var (
		typeName, prefix, state string
		pageSize                int
		retryFor                time.Duration
	)
	fs := cmd.Flags()
	fs.StringVar(&typeName, "type", "", "only this function type <namespace>/<type> (default: every type holding state)")
	fs.StringVar(&prefix, "prefix", "", "only ids that start with this")
	fs.StringVar(&state, "state", "", "only this state name")
	fs.IntVar(&pageSize, "page-size", 1000, "entries per request (at most 10000; a page also ends after 4 MiB of values)")
	fs.DurationVar(&retryFor, "retry-for", time.Minute, "keep asking for a page the runtime could not answer whole (unreachable, restarting; in cluster mode a partition moving) for this long")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		if len(pos) != 0 {
			return usagef("export takes no arguments (select with --type, --prefix, --state)")
		}
		if pageSize < 1 || pageSize > 10000 {
			return usagef("--page-size must be from 1 to 10000")
		}
		return c.export(typeName, prefix, state, pageSize, retryFor)
	})
}

// retrying calls fn again while the runtime cannot answer (no connection,
// a 502, 503 or 504: restarting, or in cluster mode a partition without an
// owner that answers), for up to retryFor; a read asked again is harmless.
func (c *stateCLI) retrying(retryFor time.Duration, fn func() error) error {
	deadline := time.Now().Add(retryFor)
	wait := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		var p *stateclient.ProblemError
		retry := !errors.As(err, &p) || p.Status == 503 || p.Status == 502 || p.Status == 504
		if !retry || c.ctx().Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		if p != nil && p.RetryAfter > wait {
			wait = p.RetryAfter
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
}

func (c *stateCLI) export(typeName, prefix, state string, pageSize int, retryFor time.Duration) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	var types []stateclient.TypeName
	if typeName != "" {
		t, err := typeArg(typeName)
		if err != nil {
			return err
		}
		types = append(types, t)
	} else {
		var all *stateclient.Types
		err := c.retrying(retryFor, func() error {
			var err error
			all, err = cl.ListTypes(c.ctx(), "")
			if err == nil && len(all.MissingPartitions) > 0 {
				// In cluster mode a type held only in those partitions
				// would be left out without a word.
				return &stateclient.ProblemError{Status: 503, Detail: fmt.Sprintf("listing the types holding state: no node answered for partitions %v", all.MissingPartitions)}
			}
			return err
		})
		if err != nil {
			return err
		}
		for _, t := range all.Types {
			if t.HoldsState {
				types = append(types, stateclient.TypeName{Namespace: t.Namespace, Type: t.Type})
			}
		}
	}
	out := bufio.NewWriterSize(c.stdout, 1<<16)
	n := 0
	start := time.Now()
	for _, t := range types {
		after := ""
		for {
			var p *stateclient.ExportPage
			err := c.retrying(retryFor, func() error {
				var err error
				p, err = cl.ExportPage(c.ctx(), t, stateclient.ExportOptions{Prefix: prefix, State: state, After: after, Limit: pageSize})
				return err
			})
			if err != nil {
				out.Flush()
				return fmt.Errorf("export of %s after %d entries: %w", t, n, err)
			}
			for _, e := range p.Entries {
				b, err := json.Marshal(e)
				if err != nil {
					return err
				}
				out.Write(b)
				if err := out.WriteByte('\n'); err != nil {
					return fmt.Errorf("writing the export: %w", err)
				}
				n++
			}
			if p.Next == nil {
				break
			}
			after = *p.Next
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("writing the export: %w", err)
	}
	fmt.Fprintf(c.stderr, "exported %d entries of %d function types in %s\n", n, len(types), time.Since(start).Round(time.Millisecond))
	return nil
}

// importCmd writes exported lines back.
func (c *stateCLI) importCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import [--mode absent|overwrite|if-match] [--resume <import-id>] < state.jsonl",
		Short: "Write exported entries back, one mutation per line",
		Long: `Reads lines "statefun state export" wrote from stdin and writes each entry back
as a mutation, like a PUT: in its address's mailbox order, audited. --mode
absent writes an entry only where it has no value (the default), overwrite
every entry, if-match only where the entry still holds the line's version.
Lines travel in batches; progress goes to stderr.

The import has an id (printed first): line n is mutation "<id>.<n>", in its
receipt and in the audit log ("import" and "line"). A line is applied at most
once: if the command or the runtime stops, run the same command on the same
input with --resume <id>; the lines already applied are not applied again.

A line that is not an exported entry stops the import: every line before it is
written, none after, and the error names the line. A line whose condition
fails (an if-match conflict, a typename the function registered otherwise) is
reported with its number and the import goes on. Exit status 1 when a line
failed or was refused (in mode absent an entry that has a value is only
counted).`,
	}
	var (
		mode, resume, reason string
		batch                int
		retryFor             time.Duration
	)
	fs := cmd.Flags()
	choiceVarP(fs, &mode, "mode", "", stateclient.ImportAbsent, []string{stateclient.ImportAbsent, stateclient.ImportOverwrite, stateclient.ImportIfMatch},
		"which entries to write: absent (only where none), overwrite, if-match (only where the entry holds the exported version)")
	fs.StringVar(&resume, "resume", "", "go on with this import (its id, printed when it started): lines it applied are not applied again")
	fs.StringVar(&reason, "reason", "", "why, recorded in the audit log (default \"import <id>\")")
	fs.IntVar(&batch, "batch", 1000, "lines per request (at most 1000)")
	fs.DurationVar(&retryFor, "retry-for", time.Minute, "keep sending a batch the runtime could not take (unreachable, busy, restarting) for this long")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		if len(pos) != 0 {
			return usagef("import takes no arguments; the lines come on stdin")
		}
		if batch < 1 || batch > stateclient.MaxImportLines {
			return usagef("--batch must be from 1 to %d", stateclient.MaxImportLines)
		}
		if resume != "" && !strings.HasPrefix(resume, "import-") {
			return usagef("--resume %q: an import id starts with import- (the first line an import printed)", resume)
		}
		return c.importLines(mode, resume, reason, batch, retryFor)
	})
}

// maxImportLineBytes caps one input line: a value as large as a PUT takes
// (8 MiB) in base64, with room for its address.
const maxImportLineBytes = 12 << 20

// maxImportBatchBytes is when a batch is sent before it is full.
const maxImportBatchBytes = 8 << 20

// importer runs one import.
type importer struct {
	c        *stateCLI
	cl       *stateclient.Client
	id, mode string
	reason   string
	retryFor time.Duration

	lines    []stateclient.ImportLine
	size     int
	names    map[int64]string // each pending line's entry, for messages
	read     int64            // lines sent and answered
	applied  int
	replayed int
	skipped  int
	refused  int
	start    time.Time
	lastShow time.Time
}

func (c *stateCLI) importLines(mode, resume, reason string, batch int, retryFor time.Duration) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	im := &importer{c: c, cl: cl, id: resume, mode: mode, reason: reason, retryFor: retryFor, names: map[int64]string{}, start: time.Now(), lastShow: time.Now()}
	if im.id == "" {
		im.id = stateclient.NewImportID()
		fmt.Fprintf(c.stderr, "import %s (mode %s); if it stops, run it again with --resume %s\n", im.id, mode, im.id)
	} else {
		fmt.Fprintf(c.stderr, "resuming import %s (mode %s)\n", im.id, mode)
	}
	in := bufio.NewReaderSize(c.stdin, 1<<16)
	var lineNo int64
	for {
		line, err := readLine(in, maxImportLineBytes)
		if err == io.EOF {
			break
		}
		lineNo++
		if err != nil {
			return im.stop(lineNo, err.Error())
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e stateclient.ExportLine
		if err := json.Unmarshal(line, &e); err != nil || line[0] != '{' {
			if err == nil {
				err = errors.New("not a JSON object")
			}
			return im.stop(lineNo, "not an exported entry: "+err.Error())
		}
		if len(im.lines) == batch || (len(im.lines) > 0 && im.size+len(line) > maxImportBatchBytes) {
			if err := im.send(); err != nil {
				return err
			}
		}
		im.lines = append(im.lines, stateclient.ImportLine{Line: lineNo, Entry: bytes.Clone(line)})
		im.size += len(line)
		im.names[lineNo] = fmt.Sprintf("%s/%s %s %s", e.Address.Namespace, e.Address.Type, shellQuote(e.Address.ID), shellQuote(e.State))
	}
	if err := im.send(); err != nil {
		return err
	}
	im.summary()
	if im.refused > 0 {
		return fmt.Errorf("%d line(s) were refused (above); the others are imported", im.refused)
	}
	return nil
}

// readLine reads one line without its newline, at most max bytes; io.EOF
// after the last.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			// Skip the rest of the line, so the numbering stays right for
			// the error.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			return nil, fmt.Errorf("longer than %d bytes", max)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(buf) > 0:
			return buf, nil
		default:
			return nil, err
		}
	}
}

// stop ends the import at a bad line: the lines before it are sent first.
func (im *importer) stop(line int64, why string) error {
	if err := im.send(); err != nil {
		return err
	}
	im.summary()
	return fmt.Errorf("line %d: %s\nevery line before it is imported, none after; fix it and run the same command with --resume %s", line, why, im.id)
}

// send sends the pending lines until each has an outcome.
func (im *importer) send() error {
	deadline := time.Now().Add(im.retryFor)
	for len(im.lines) > 0 {
		b, err := im.sendOnce()
		var p *stateclient.ProblemError
		if errors.As(err, &p) && p.Line > 0 {
			// The batch was refused whole for this line: send the lines
			// before it, then stop there.
			var before []stateclient.ImportLine
			for _, l := range im.lines {
				if l.Line < p.Line {
					before = append(before, l)
				}
			}
			im.lines = before
			if err := im.send(); err != nil {
				return err
			}
			im.summary()
			return fmt.Errorf("line %d: %s\nevery line before it is imported, none after; fix it and run the same command with --resume %s",
				p.Line, strings.TrimSuffix(strings.TrimPrefix(p.Detail, fmt.Sprintf("line %d: ", p.Line)), "; nothing of this batch was applied"), im.id)
		}
		if err != nil {
			return withHint(err, fmt.Sprintf("lines up to %d are imported; run the same command with --resume %s to go on", im.read, im.id))
		}
		var again []stateclient.ImportLine
		byLine := map[int64]stateclient.ImportLine{}
		for _, l := range im.lines {
			byLine[l.Line] = l
		}
		for _, r := range b.Results {
			im.count(r)
			if r.Status == "failed" {
				again = append(again, byLine[r.Line])
			} else {
				delete(im.names, r.Line)
			}
		}
		if len(again) > 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("line %d was not applied: %s\nlines before it are imported; run the same command with --resume %s to go on",
					again[0].Line, failedReason(b, again[0].Line), im.id)
			}
			time.Sleep(time.Second)
		}
		if len(again) == 0 {
			im.read = im.lines[len(im.lines)-1].Line
		}
		im.lines = again
	}
	im.size = 0
	im.progress()
	return nil
}

// failedReason is why a line failed.
func failedReason(b *stateclient.ImportBatch, line int64) string {
	for _, r := range b.Results {
		if r.Line == line {
			return r.Reason
		}
	}
	return ""
}

// sendOnce sends the pending lines, again while the runtime cannot take
// them (a 503, no connection), for up to retryFor. Sending a line twice
// applies it once.
func (im *importer) sendOnce() (*stateclient.ImportBatch, error) {
	deadline := time.Now().Add(im.retryFor)
	wait := 100 * time.Millisecond
	for {
		b, err := im.cl.Import(im.c.ctx(), im.id, im.mode, im.reason, im.lines)
		if err == nil {
			return b, nil
		}
		var p *stateclient.ProblemError
		retry := !errors.As(err, &p) || p.Status == 503 || p.Status == 502 || p.Status == 504
		if !retry || time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		if p != nil && p.RetryAfter > wait {
			wait = p.RetryAfter
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
}

// count tallies one line's outcome and reports a refused one.
func (im *importer) count(r stateclient.ImportResult) {
	switch {
	case r.Status == "committed" && r.Replayed:
		im.replayed++
	case r.Status == "committed":
		im.applied++
	case r.Status == "rejected" && r.Rejection == "precondition" && im.mode == stateclient.ImportAbsent:
		im.skipped++
	case r.Status == "rejected":
		im.refused++
		what := r.Reason
		if r.Rejection == "precondition" {
			cur := "no value"
			if r.Version != nil {
				cur = "version " + *r.Version
			}
			what = "conflict: the entry changed since the export (it holds " + cur + ")"
		}
		fmt.Fprintf(im.c.stderr, "line %d: %s: %s (mutation %s)\n", r.Line, im.names[r.Line], what, r.Mutation)
	}
}

// progress prints a progress line every 2 seconds.
func (im *importer) progress() {
	if time.Since(im.lastShow) < 2*time.Second {
		return
	}
	im.lastShow = time.Now()
	im.c.stderr.Write([]byte(im.status() + "\n"))
}

func (im *importer) status() string {
	el := time.Since(im.start)
	done := im.applied + im.replayed + im.skipped + im.refused
	return fmt.Sprintf("import %s: %d lines done (%d written, %d applied before, %d skipped: had a value, %d refused) in %s, %.0f lines/s",
		im.id, done, im.applied, im.replayed, im.skipped, im.refused, el.Round(time.Millisecond), float64(done)/max(el.Seconds(), 1e-3))
}

func (im *importer) summary() { fmt.Fprintln(im.c.stderr, im.status()) }
