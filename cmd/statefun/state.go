package main

// `statefun state`: the command line of the state access API
// (docs/reference/state-api.md). This file holds the command group, the flags every
// command shares, argument parsing and the wording of errors;
// state_cmds.go the commands, state_edit.go `edit` and its diff,
// output.go how results are printed.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

const stateLong = `Read, write, delete and repair the state of a running statefun through its
state access API (the admin listener of "statefun run"). A function instance is
two arguments, its type and its id, so an id may hold '/', spaces or any
character: statefun state get example/person 'Bob/Smith' visits.
Put an id that starts with '-' after "--"; a negative number is an argument.

Flags may come before or after the command and its arguments.`

const stateFoot = `Output: -o table (the default, for people) or -o json (stable, for scripts);
get prints the value itself, ls one name per line. Times are RFC 3339 in UTC.
Commands that delete or overwrite a whole instance (delete --all, restore,
delete-address) ask for confirmation on a terminal; without one they need --yes.

Exit status: 0 done, 1 failed (not found, condition failed, refused, no
server...), 2 wrong usage.`

// stateCLI runs the `statefun state` commands of one cli: the global flags
// of the state client, bound by newStateCmd.
type stateCLI struct {
	*cli

	server, token, tokenFile, cacert string
	timeout                          time.Duration
	// flags is the state command's persistent flag set, to tell a flag
	// given from its environment variable.
	flags *pflag.FlagSet
}

// newStateCLI returns a stateCLI over the streams; its run runs one
// command line of `statefun state`.
func newStateCLI(stdin io.Reader, stdout, stderr io.Writer) *stateCLI {
	return &stateCLI{cli: newCLI(stdin, stdout, stderr)}
}

// stateMain runs `statefun state <args>` and returns the exit code.
func stateMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newStateCLI(stdin, stdout, stderr).run(args)
}

// run runs `statefun state <args>` and returns the exit code.
func (c *stateCLI) run(args []string) int {
	return c.cli.execute(append([]string{"state"}, args...))
}

// newStateCmd builds `statefun state` and its commands.
func newStateCmd(cl *cli) *cobra.Command {
	c := &stateCLI{cli: cl}
	cmd := &cobra.Command{
		Use:         "state <command> [flags] <args>",
		Short:       "Read, write and repair a running application's state (the state API)",
		Long:        stateLong,
		Annotations: map[string]string{footAnnotation: stateFoot},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				writeHelp(c.stderr, cmd)
				return exitError{2}
			case args[0] == "help":
				writeHelp(c.stderr, cmd)
				return nil
			}
			return usagef("unknown command %q%s", args[0], suggest(cmd, args[0]))
		},
	}
	c.bindClientFlags(cmd.PersistentFlags(), 30*time.Second)
	cmd.AddCommand(
		c.getCmd(), c.putCmd(), c.deleteCmd(), c.lsCmd(), c.editCmd(), c.revertCmd(), c.historyCmd(), c.restoreCmd(),
		c.receiptCmd(), c.auditCmd(), c.deadLettersCmd(), c.failingCmd(), c.inboxCmd(), c.pauseCmd(), c.resumeCmd(),
		c.pausesCmd(), c.skipCmd(), c.editMessageCmd(), c.cancelCmd(), c.deleteAddressCmd(), c.skippedCmd(), c.resendCmd(),
		c.exportCmd(), c.importCmd(),
	)
	return cmd
}

// bindClientFlags binds the flags that say how to reach the state API to
// fs: the state commands', `statefun jobs`' and `statefun backup`'s.
func (c *stateCLI) bindClientFlags(fs *pflag.FlagSet, timeout time.Duration) {
	fs.SortFlags = false
	fs.StringVar(&c.server, "server", "http://127.0.0.1:8070", "the admin listener's URL")
	bindEnv(fs, "server", "STATEFUN_SERVER")
	fs.Var(secretValue{&c.token}, "token", "bearer token; --token-file keeps it off the command line")
	bindEnv(fs, "token", "STATEFUN_TOKEN")
	fs.StringVar(&c.tokenFile, "token-file", "", "read the bearer token from this file")
	bindEnv(fs, "token-file", "STATEFUN_TOKEN_FILE")
	fs.StringVar(&c.cacert, "cacert", "", "trust the PEM certificates in this file for https")
	bindEnv(fs, "cacert", "STATEFUN_CACERT")
	fs.DurationVar(&c.timeout, "timeout", timeout, "time limit of each request; 0 for none")
	c.flags = fs
}

// stateCommand returns a command of `statefun state`: its arguments may be
// anything, among its flags (normalizeArgs), and its run reads the global
// flags' environment variables first.
func (c *stateCLI) stateCommand(cmd *cobra.Command, run func(cmd *cobra.Command, args []string) error) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[positionalAnnotation] = "true"
	cmd.Flags().SortFlags = false
	// Arguments are types, ids and state names, never files.
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	if c.completing {
		// cobra keeps flag completions in a map of its own for the life of
		// the process: only a completion request, a process of its own,
		// fills it.
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if ch, ok := f.Value.(*choiceValue); ok {
				_ = cmd.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(ch.choices, cobra.ShellCompDirectiveNoFileComp))
			}
		})
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := applyEnv(c.flags, c.env); err != nil {
			return err
		}
		return run(cmd, args)
	}
	return cmd
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

// bearerToken returns the token the global flags give: --token or
// --token-file on the command line (not both), else STATEFUN_TOKEN_FILE,
// else STATEFUN_TOKEN.
func (c *stateCLI) bearerToken() (string, error) {
	tokenSet, fileSet := c.flags.Changed("token"), c.flags.Changed("token-file")
	if tokenSet && fileSet {
		return "", usagef("give --token or --token-file, not both")
	}
	file := c.tokenFile
	if tokenSet {
		file = ""
	}
	if file == "" {
		return c.token, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// client returns the API client the global flags describe.
func (c *stateCLI) client() (*stateclient.Client, error) {
	token, err := c.bearerToken()
	if err != nil {
		return nil, err
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

// describeAddress names an address for messages: example/person Bob.
func describeAddress(a stateclient.Address) string {
	return fmt.Sprintf("%s/%s %s", a.Namespace, a.Type, shellQuote(a.ID))
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

// confirm asks a yes/no question on stderr and reads the answer from stdin.
func (c *stateCLI) confirm(question string) (bool, error) {
	fmt.Fprint(c.stderr, question)
	line, err := bufio.NewReader(c.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(c.stderr)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// yesFlag registers --yes/-y: do without asking for confirmation.
func yesFlag(fs *pflag.FlagSet, p *bool, what string) {
	fs.BoolVarP(p, "yes", "y", false, what+" without asking for confirmation (required when stdin is not a terminal)")
}

// confirmDestructive asks before a command that deletes or overwrites a
// whole instance: on a terminal it asks question; without one it refuses
// unless --yes was given, saying so. Declining is exit status 1 with
// nothing changed.
func (c *stateCLI) confirmDestructive(yes bool, question string) error {
	if yes {
		return nil
	}
	if !c.terminal(c.stdin) {
		return usagef("stdin is not a terminal, so this cannot be confirmed: pass --yes to do it without asking")
	}
	ok, err := c.confirm(question + " [y/N] ")
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("not confirmed: nothing was changed")
	}
	return nil
}
