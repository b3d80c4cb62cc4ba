package e2e

// Runnable blocks in the Markdown docs (docs/explanation/testing.md, "Docs that are
// tested"): extraction of the blocks marked `<!-- test: <scenario> -->`,
// and the loose comparison of what a command printed with what the doc
// shows.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docCommand is one command of a runnable block.
type docCommand struct {
	line int    // in the Markdown file
	text string // the command as the doc shows it
	// want is the output the doc shows after the command; nil when it
	// shows none, and then only the exit status is checked.
	want []string
}

// docBlock is a code block marked runnable.
type docBlock struct {
	file     string
	line     int // of the marker
	scenario string
	// retry: a command that shows output is run again until it prints
	// it, for reads that wait on the runtime (an egress, a failing batch).
	retry bool
	cmds  []docCommand
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d (%s)", b.file, b.line, b.scenario) }

var (
	markerRe    = regexp.MustCompile(`^<!--\s*test:(.*?)-->\s*$`)
	fenceRe     = regexp.MustCompile("^(```+|~~~+)")
	scenarioRe  = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	captureRe   = regexp.MustCompile(`<[a-z][a-z0-9-]*>`)
	ellipsisTok = "..."
)

// readDocBlocks returns the marked blocks of a Markdown file in order;
// name is the file as errors name it. A marker that is malformed or not
// followed by a code block is an error naming the file and line.
func readDocBlocks(path, name string) ([]docBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "    ") || strings.HasPrefix(lines[i], "\t") {
			continue // a marker shown in a code block, as docs/explanation/testing.md does
		}
		m := markerRe.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		b := docBlock{file: name, line: i + 1}
		words := strings.Fields(m[1])
		if len(words) == 0 || !scenarioRe.MatchString(words[0]) {
			return nil, fmt.Errorf("%s:%d: a test marker is <!-- test: <scenario> [retry] -->, got %q", name, i+1, lines[i])
		}
		b.scenario = words[0]
		for _, w := range words[1:] {
			if w != "retry" {
				return nil, fmt.Errorf("%s:%d: unknown word %q in a test marker (only \"retry\")", name, i+1, w)
			}
			b.retry = true
		}
		// The block: the next non-blank line opens a fence or is indented.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		var body []int // line indexes of the block's content
		var text []string
		switch {
		case j < len(lines) && fenceRe.MatchString(lines[j]):
			fence := fenceRe.FindString(lines[j])
			k := j + 1
			for ; k < len(lines) && !strings.HasPrefix(lines[k], fence); k++ {
				body, text = append(body, k), append(text, lines[k])
			}
			if k == len(lines) {
				return nil, fmt.Errorf("%s:%d: the fenced block after the test marker is not closed", name, i+1)
			}
			i = k
		case j < len(lines) && (strings.HasPrefix(lines[j], "    ") || strings.HasPrefix(lines[j], "\t")):
			k := j
			for ; k < len(lines); k++ {
				l := lines[k]
				if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "    ") && !strings.HasPrefix(l, "\t") {
					break
				}
				l = strings.TrimPrefix(l, "\t")
				l = strings.TrimPrefix(l, "    ")
				body, text = append(body, k), append(text, l)
			}
			i = k - 1
		default:
			return nil, fmt.Errorf("%s:%d: the test marker is not followed by a code block", name, i+1)
		}
		cmds, err := parseCommands(text, body)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, b.line, err)
		}
		if len(cmds) == 0 {
			return nil, fmt.Errorf("%s:%d: the block after the test marker has no command", name, i+1)
		}
		b.cmds = cmds
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// parseCommands splits a block's lines into commands. With a "$ " prompt
// on any line, prompted lines are commands and the lines after one (up
// to the next) its shown output; without, every line that is not blank
// and not a "#" comment is a command.
func parseCommands(text []string, lineIdx []int) ([]docCommand, error) {
	prompted := false
	for _, l := range text {
		if strings.HasPrefix(l, "$ ") {
			prompted = true
		}
	}
	var cmds []docCommand
	for n, l := range text {
		switch {
		case !prompted:
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				cmds = append(cmds, docCommand{line: lineIdx[n] + 1, text: t})
			}
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, docCommand{line: lineIdx[n] + 1, text: strings.TrimSpace(l[2:])})
		case len(cmds) == 0:
			if strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("line %d: output before the first \"$ \" command", lineIdx[n]+1)
			}
		default:
			c := &cmds[len(cmds)-1]
			c.want = append(c.want, l)
		}
	}
	for i := range cmds {
		cmds[i].want = trimBlank(cmds[i].want)
	}
	return cmds, nil
}

// trimBlank drops the trailing blank lines; nil when nothing is left.
func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return nil
	}
	return lines
}

// squash makes a line comparable loosely: runs of white space (a table's
// column padding, JSON indentation) count as one space.
func squash(l string) string { return strings.Join(strings.Fields(l), " ") }

// matchOutput compares a command's output with the doc's. Lines compare
// with white space squashed; "..." alone on a line stands for any number
// of lines, within a line for any text; "<name>" for one word, which is
// returned among the captures so that a later command can use it.
func matchOutput(want []string, got string) (map[string]string, bool) {
	gotLines := trimBlank(strings.Split(strings.TrimRight(got, "\n"), "\n"))
	var g []string
	for _, l := range gotLines {
		g = append(g, squash(l))
	}
	var w []string
	for _, l := range want {
		w = append(w, squash(l))
	}
	return matchLines(w, g, map[string]string{})
}

func matchLines(want, got []string, caps map[string]string) (map[string]string, bool) {
	if len(want) == 0 {
		return caps, len(got) == 0
	}
	if want[0] == ellipsisTok {
		for skip := 0; skip <= len(got); skip++ {
			if c, ok := matchLines(want[1:], got[skip:], copyCaps(caps)); ok {
				return c, true
			}
		}
		return nil, false
	}
	if len(got) == 0 {
		return nil, false
	}
	c := copyCaps(caps)
	if !matchLine(want[0], got[0], c) {
		return nil, false
	}
	return matchLines(want[1:], got[1:], c)
}

// docVariables are what differs from one run to the next in output a
// doc copied from a real run: a time in RFC 3339 (UTC, as the CLI and the
// API print it) and a mutation id. In a doc's output each stands for any
// other of its kind, so that the docs show output as it really prints.
var docVariables = []*regexp.Regexp{
	regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z`),
	regexp.MustCompile(`[0-9a-z]{8}-[0-9a-f]{8}-[0-9a-f]{8}`),
}

// literalPattern is the regular expression of a doc's literal text: the
// text itself, but for the times and mutation ids in it.
func literalPattern(s string) string {
	if s == "" {
		return ""
	}
	for _, v := range docVariables {
		if loc := v.FindStringIndex(s); loc != nil {
			return literalPattern(s[:loc[0]]) + "(?:" + v.String() + ")" + literalPattern(s[loc[1]:])
		}
	}
	return regexp.QuoteMeta(s)
}

// matchLine matches one squashed line, adding its captures to caps. A
// name captured before must match the same word again.
func matchLine(want, got string, caps map[string]string) bool {
	var re strings.Builder
	var names []string
	re.WriteString("^")
	rest := want
	for rest != "" {
		loc := captureRe.FindStringIndex(rest)
		el := strings.Index(rest, ellipsisTok)
		switch {
		case loc == nil && el < 0:
			re.WriteString(literalPattern(rest))
			rest = ""
		case loc == nil || (el >= 0 && el < loc[0]):
			re.WriteString(literalPattern(rest[:el]) + ".*")
			rest = rest[el+len(ellipsisTok):]
		default:
			name := rest[loc[0]:loc[1]]
			re.WriteString(literalPattern(rest[:loc[0]]))
			if v, ok := caps[name]; ok {
				re.WriteString(regexp.QuoteMeta(v))
			} else {
				re.WriteString(`(\S+)`)
				names = append(names, name)
			}
			rest = rest[loc[1]:]
		}
	}
	re.WriteString("$")
	m := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if m == nil {
		return false
	}
	for i, name := range names {
		if v, ok := caps[name]; ok && v != m[i+1] {
			return false // one name, two words
		}
		caps[name] = m[i+1]
	}
	return true
}

func copyCaps(c map[string]string) map[string]string {
	out := make(map[string]string, len(c))
	for k, v := range c {
		out[k] = v
	}
	return out
}

func TestMatchOutput(t *testing.T) {
	for _, tc := range []struct {
		want []string
		got  string
		ok   bool
		caps map[string]string
	}{
		{[]string{"41"}, "41", true, nil},
		{[]string{"41"}, "42\n", false, nil},
		{[]string{"A   B", "1 2"}, "A B\n1    2\n\n", true, nil},
		{[]string{"{", "...", "}"}, "{\n  \"a\": 1,\n  \"b\": 2\n}\n", true, nil},
		{[]string{"{", "...", "}"}, "{\n}", true, nil},
		{[]string{"x ... z"}, "x y y z", true, nil},
		{[]string{"x ... z"}, "x y y", false, nil},
		{[]string{"ID STATUS", "<id> committed ..."}, "ID STATUS\nm-1 committed 4 5", true, map[string]string{"<id>": "m-1"}},
		{[]string{"<id> <id>"}, "a b", false, nil},
		{[]string{"a", "..."}, "b", false, nil},
		// A time and a mutation id copied from a run match another run's.
		{[]string{"2026-12-02T06:46:27.740Z anonymous pause mx5riv18-00000001-febd17e8 not JSON"},
			"2027-01-30T23:01:02.5Z anonymous pause mz0abc12-0000000a-0123abcd not JSON", true, nil},
		{[]string{"2026-12-02T06:46:27.740Z anonymous pause"}, "2026-12-02T06:46:27.740Z anonymous resume", false, nil},
		{[]string{"at 2026-12-02T06:46:27.740Z"}, "at yesterday", false, nil},
		{[]string{"visit number 42."}, "visit number 43.", false, nil},
	} {
		caps, ok := matchOutput(tc.want, tc.got)
		if ok != tc.ok {
			t.Errorf("matchOutput(%q, %q) = %v, want %v", tc.want, tc.got, ok, tc.ok)
		}
		for k, v := range tc.caps {
			if caps[k] != v {
				t.Errorf("matchOutput(%q, %q): %s = %q, want %q", tc.want, tc.got, k, caps[k], v)
			}
		}
	}
}

func TestReadDocBlocks(t *testing.T) {
	md := "# T\n\n<!-- test: demo retry -->\n\n    $ echo hi   # a comment\n    hi\n    $ true\n\ntext\n\n<!-- test: demo -->\n```sh\necho one\n# not run\necho two\n```\n\n<!-- test: demo -->\ntext, no block\n"
	f := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(f, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := readDocBlocks(f, "x.md")
	if err == nil || !strings.Contains(err.Error(), "x.md:18: the test marker is not followed by a code block") {
		t.Fatalf("error %v, want one naming x.md:18", err)
	}
	if err := os.WriteFile(f, []byte(md[:strings.LastIndex(md, "<!--")]), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := readDocBlocks(f, "x.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || !blocks[0].retry || blocks[1].retry {
		t.Fatalf("blocks %+v", blocks)
	}
	c := blocks[0].cmds
	if len(c) != 2 || c[0].text != "echo hi   # a comment" || c[0].line != 5 || len(c[0].want) != 1 || c[0].want[0] != "hi" || c[1].want != nil {
		t.Errorf("prompted block %+v", c)
	}
	c = blocks[1].cmds
	if len(c) != 2 || c[0].text != "echo one" || c[1].text != "echo two" || c[1].line != 15 || c[0].want != nil {
		t.Errorf("fenced block %+v", c)
	}
}
