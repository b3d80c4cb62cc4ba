package main

// `statefun state`: the command line of the state access API
// (docs/state-api.md). This file holds the dispatch, the flags every
// command shares, argument parsing and the mapping of errors to exit codes;
// state_cmds.go the commands, state_edit.go `edit` and its diff.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

const stateUsage = `Usage: statefun state [global flags] <command> [flags] <args>

Read, write and delete the state of a running statefun through its state
access API (the admin listener of "statefun run"). A function instance is
two arguments, its type and its id, so an id may hold '/', spaces or any
character: statefun state get example/person 'Bob/Smith' visits.
Put an id that starts with '-' after "--".

Commands:
  get     <ns>/<type> <id> <state>           print a value (-o text|raw|json)
  put     <ns>/<type> <id> <state> <value>   set a value; <value> "-" reads stdin
  delete  <ns>/<type> <id> <state>           drop one entry
  delete  --all <ns>/<type> <id>             drop every entry of an instance
  ls                                         function types
  ls      <ns>                               the function types of a namespace
  ls      <ns>/<type>                        ids holding state, one per line
  ls      <ns>/<type> <id>                   the entries of an instance
  edit    <ns>/<type> <id> <state>           edit the JSON envelope in $EDITOR,
                                             write it back with If-Match
  revert  <mutation-id>                      undo a mutation
  history <ns>/<type> <id> <state>           every committed change of an entry, with its cause
  restore --as-of C|--as-of-time T <ns>/<type> <id> [<state>]
                                             set an instance (or entry) back to a point in time
  receipt <mutation-id>                      a mutation's receipt (--wait 10s)
  audit   [--namespace --type --id --state --principal --mutation --since --until --limit]
                                             the audit log
  dead-letters                               the dead letters of every Kafka ingress, counted
  dead-letters [--topic --partition --reason --since --until --limit] <ns>/<name>
                                             one ingress's dead letters (records it could not deliver)
  failing [<ns>/<type>]                      addresses whose batch keeps failing
  inbox   <ns>/<type> <id>                   what an address holds: failing batch, queue, timers
  pause   [--reason --for --until] <ns>/<type> [<id>]
                                             hold an address (no id: every address of the type)
  resume  [--reason] <ns>/<type> [<id>]      release it: retry the failed batch, then the queue
  pauses  [<ns>/<type>]                      the pauses in force
  skip    [--key --reason] <ns>/<type> <id>  move a message (the head) to the message dead letters
  edit-message [--key] --typename (--text | --file) <ns>/<type> <id>
                                             replace a queued message's typename and value
  cancel  (--key | --timer | --sender --cancellation-token) <ns>/<type> <id>
                                             drop a queued or a delayed message (revertible)
  delete-address [--reason] <ns>/<type> <id> drop a paused address's state, inbox and timers (revertible)
  skipped [--type <ns>/<type>] [<id>]        the skipped messages (message dead letters)
  resend  [--to <ns>/<type>/<id>] <id>       send a skipped message again

Global flags, before or after the command:
  --server URL       the admin listener (env STATEFUN_SERVER; default http://127.0.0.1:8070)
  --token TOKEN      bearer token (env STATEFUN_TOKEN)
  --token-file FILE  read the bearer token from FILE (env STATEFUN_TOKEN_FILE)
  --cacert FILE      trust the PEM certificates in FILE for https (env STATEFUN_CACERT)
  --timeout D        time limit of each request (default 30s)

Exit status: 0 done, 1 failed (not found, condition failed, refused, no
server...), 2 wrong usage. Run "statefun state <command> -h" for its flags.
`

// stateCLI runs one `statefun state` command.
type stateCLI struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	server, token, tokenFile, cacert string
	timeout                          time.Duration

	// terminal reports whether stdin or stdout is a terminal; tests replace
	// it.
	terminal func(f any) bool
}

// usageError is wrong usage: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// stateMain runs `statefun state <args>` and returns the exit code. It has
// the shape of mainErr, plus stdin, so tests run it in-process.
func stateMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newStateCLI(stdin, stdout, stderr).run(args)
}

func newStateCLI(stdin io.Reader, stdout, stderr io.Writer) *stateCLI {
	return &stateCLI{stdin: stdin, stdout: stdout, stderr: stderr, timeout: 30 * time.Second,
		server:    env("STATEFUN_SERVER", "http://127.0.0.1:8070"),
		token:     env("STATEFUN_TOKEN", ""),
		tokenFile: env("STATEFUN_TOKEN_FILE", ""),
		cacert:    env("STATEFUN_CACERT", ""),
		terminal:  isTerminal,
	}
}

// run runs `statefun state <args>` and returns the exit code.
func (c *stateCLI) run(args []string) int {
	stdout, stderr := c.stdout, c.stderr
	fs := c.flagSet("statefun state", nil)
	fs.Usage = func() { fmt.Fprint(stderr, stateUsage) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, stateUsage)
		return 2
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	cmds := map[string]func([]string) error{
		"get": c.get, "put": c.put, "delete": c.delete, "ls": c.ls,
		"edit": c.edit, "revert": c.revert, "receipt": c.receipt, "audit": c.audit,
		"dead-letters": c.deadLetters, "history": c.history, "restore": c.restore,
		"failing": c.failing, "inbox": c.inbox, "pauses": c.pauses, "pause": c.pause, "resume": c.resume,
		"skip": c.skip, "edit-message": c.editMessage, "cancel": c.cancel, "delete-address": c.deleteAddress,
		"skipped": c.skipped, "resend": c.resend,
	}
	if name == "help" {
		fmt.Fprint(stdout, stateUsage)
		return 0
	}
	cmd, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "statefun state: unknown command %q\n\n%s", name, stateUsage)
		return 2
	}
	return c.exit("statefun state "+name, cmd(rest))
}

// exit prints err and returns its exit code.
func (c *stateCLI) exit(prog string, err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errParse):
		return 2 // the flag package printed it
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "%s: %s\nRun %q for usage.\n", prog, ue.msg, prog+" -h")
		return 2
	}
	fmt.Fprintf(c.stderr, "%s: %s\n", prog, describe(err))
	return 1
}

// hintError adds advice to an error's description.
type hintError struct {
	err  error
	hint string
}

func (e hintError) Error() string { return e.err.Error() + "\n" + e.hint }
func (e hintError) Unwrap() error { return e.err }

// withHint returns err with a line of advice that describe prints after it.
func withHint(err error, hint string) error { return hintError{err, hint} }

// describe says what went wrong in an operator's words.
func describe(err error) string {
	var h hintError
	if errors.As(err, &h) {
		return describe(h.err) + "\n" + h.hint
	}
	var p *stateclient.ProblemError
	if errors.As(err, &p) {
		msg := p.Detail
		if msg == "" {
			msg = http.StatusText(p.Status)
		}
		switch {
		case p.Status == http.StatusNotFound:
			msg = "not found: " + msg
		case p.Status == http.StatusPreconditionFailed:
			msg = "condition failed: " + msg
			if p.CurrentVersion != "" {
				msg += " (current version " + p.CurrentVersion + ")"
			} else {
				msg += " (the entry has no value now)"
			}
		case p.Status == http.StatusUnauthorized:
			msg += " (set --token or STATEFUN_TOKEN)"
		case p.Status == http.StatusServiceUnavailable && p.RetryAfter > 0:
			msg += fmt.Sprintf(" (retry after %s)", p.RetryAfter)
		}
		return fmt.Sprintf("%s (%d %s)", msg, p.Status, http.StatusText(p.Status))
	}
	return strings.TrimPrefix(err.Error(), "stateclient: ")
}

// errParse is a flag error the flag package has printed already.
var errParse = errors.New("flag parse error")

// flagSet returns a FlagSet with the global flags, bound to c so they may
// come before or after the command name. synopsis, when set, is printed by
// -h above the flags.
func (c *stateCLI) flagSet(name string, synopsis []string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.server, "server", c.server, "the admin listener's URL (env STATEFUN_SERVER)")
	fs.Var(secretFlag{&c.token}, "token", "bearer token (env STATEFUN_TOKEN)")
	fs.StringVar(&c.tokenFile, "token-file", c.tokenFile, "read the bearer token from this file (env STATEFUN_TOKEN_FILE)")
	fs.StringVar(&c.cacert, "cacert", c.cacert, "trust the PEM certificates in this file for https (env STATEFUN_CACERT)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "time limit of each request; 0 for none")
	if synopsis != nil {
		fs.Usage = func() {
			fmt.Fprintln(c.stderr, "Usage:")
			for _, s := range synopsis {
				fmt.Fprintln(c.stderr, "  "+s)
			}
			fmt.Fprintln(c.stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// secretFlag is a string flag whose value -h does not print.
type secretFlag struct{ p *string }

func (s secretFlag) String() string     { return "" }
func (s secretFlag) Set(v string) error { *s.p = v; return nil }

// parse parses args with flags anywhere among the positional arguments
// (until "--", after which every argument is positional) and returns the
// positional ones. An argument that looks like a negative number ("-5",
// "-0.5") is positional, so `put ... count -5` works.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errParse
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		// Take positional arguments up to the next flag.
		i := 0
		for i < len(rest) && (!strings.HasPrefix(rest[i], "-") || rest[i] == "-" || isNegativeNumber(rest[i])) {
			i++
		}
		pos = append(pos, rest[:i]...)
		args = rest[i:]
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
	}
}

func isNegativeNumber(s string) bool {
	return len(s) >= 2 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.' && len(s) > 2 && s[2] >= '0' && s[2] <= '9')
}

// client returns the API client the global flags describe.
func (c *stateCLI) client() (*stateclient.Client, error) {
	token := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	opts := []stateclient.Option{stateclient.WithToken(token), stateclient.WithTimeout(c.timeout),
		stateclient.WithUserAgent("statefun-cli/" + version())}
	if c.cacert != "" {
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", c.cacert)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		opts = append(opts, stateclient.WithHTTPClient(&http.Client{Transport: t}))
	}
	cl, err := stateclient.New(c.server, opts...)
	if err != nil {
		return nil, usageError{"--server: " + strings.TrimPrefix(err.Error(), "stateclient: ")}
	}
	return cl, nil
}

// typeArg parses a "<namespace>/<type>" argument.
func typeArg(s string) (stateclient.TypeName, error) {
	t, err := stateclient.ParseTypeName(s)
	if err != nil {
		if strings.Count(s, "/") > 1 {
			return t, usagef("%q: a function type is <namespace>/<type>; give the id as its own argument, e.g. %s %s", s,
				s[:strings.LastIndex(s, "/")], shellQuote(s[strings.LastIndex(s, "/")+1:]))
		}
		return t, usagef("%q is not a function type <namespace>/<type>", s)
	}
	return t, nil
}

// addressArgs parses "<ns>/<type> <id>".
func addressArgs(typeName, id string) (stateclient.Address, error) {
	t, err := typeArg(typeName)
	if err != nil {
		return stateclient.Address{}, err
	}
	if id == "" {
		return stateclient.Address{}, usagef("the id is empty")
	}
	return stateclient.Address{Namespace: t.Namespace, Type: t.Type, ID: id}, nil
}

// entryArgs parses "<ns>/<type> <id> <state>".
func entryArgs(pos []string) (stateclient.Address, string, error) {
	if len(pos) > 0 && len(pos) != 3 {
		if _, err := typeArg(pos[0]); err != nil {
			return stateclient.Address{}, "", err
		}
	}
	if len(pos) != 3 {
		return stateclient.Address{}, "", usagef("want <namespace>/<type> <id> <state>, got %d argument(s)", len(pos))
	}
	a, err := addressArgs(pos[0], pos[1])
	if err != nil {
		return a, "", err
	}
	if pos[2] == "" {
		return a, "", usagef("the state name is empty")
	}
	return a, pos[2], nil
}

// describeEntry names an entry for messages: example/person "Bob" visits.
func describeEntry(a stateclient.Address, state string) string {
	return fmt.Sprintf("%s/%s %s %s", a.Namespace, a.Type, shellQuote(a.ID), shellQuote(state))
}

// shellQuote returns s as is when a shell would read it as one word, else
// in single quotes.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r) || r > 0x7f && r != 0xa0)
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isTerminal reports whether f is a terminal: an *os.File that is a tty
// (not merely a character device such as /dev/null).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && isTerminalFile(file)
}

func (c *stateCLI) ctx() context.Context { return context.Background() }
