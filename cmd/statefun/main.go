// Command statefun runs StateFun applications: `statefun run --module
// module.yaml` starts the runtime on the embedded store; `statefun state`
// reads and repairs a running application's state through its state API.
//
// The command line is built on cobra by constructors (newRootCmd and the
// new*Cmd functions): nothing about it is held in package variables, so
// tests run it in-process as often as they like. docs/reference/cli.md is
// generated from these commands (`go run ./cmd/statefun gen-docs`).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

//go:generate go run . gen-docs --root ../..

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

// mainErr runs the command line args and returns the exit code: 0 done, 1
// failed, 2 wrong usage.
func mainErr(args []string, stdout, stderr io.Writer) int {
	return newCLI(os.Stdin, stdout, stderr).execute(args)
}

// cli is one run of the command line: its streams, its environment and how
// it tells a terminal.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            envSource
	// terminal reports whether stdin or stdout is a terminal; tests replace
	// it.
	terminal func(f any) bool
	// completing is set for a shell's completion request (cobra's hidden
	// __complete command).
	completing bool
}

func newCLI(stdin io.Reader, stdout, stderr io.Writer) *cli {
	return &cli{stdin: stdin, stdout: stdout, stderr: stderr, env: processEnv(), terminal: isTerminal}
}

// execute runs args (without the program name) and returns the exit code.
func (c *cli) execute(args []string) int {
	c.completing = len(args) > 0 && strings.HasPrefix(args[0], "__complete")
	root := newRootCmd(c)
	root.SetArgs(normalizeArgs(root, args))
	cmd, err := root.ExecuteC()
	if cmd == nil {
		cmd = root
	}
	return c.exit(cmd, err)
}

// exit prints err for cmd and returns its exit code.
func (c *cli) exit(cmd *cobra.Command, err error) int {
	var (
		ue usageError
		ee exitError
		re runtimeError
	)
	prog := cmd.CommandPath()
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		for _, line := range strings.Split(ue.msg, "\n") {
			fmt.Fprintf(c.stderr, "%s: %s\n", prog, line)
		}
		writeUsage(c.stderr, cmd)
		return 2
	case errors.As(err, &re):
		fmt.Fprintf(c.stderr, "statefun: %v\n", re.err)
		return 1
	}
	fmt.Fprintf(c.stderr, "%s: %s\n", prog, describe(err))
	return 1
}

// version is the module version the binary was built from.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// synopsisAnnotation holds a command's usage lines when it has more than
// the one cobra derives from Use, one per line, without the parent's path
// (the root's: without its name).
const synopsisAnnotation = "statefun-synopsis"

// newRootCmd builds the whole command tree for one run.
func newRootCmd(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "statefun",
		Short: "Run Apache Flink StateFun 3.x applications, and read and repair their state",
		Long: `statefun runs Apache Flink StateFun 3.x applications (module.yaml plus
remote functions built with the official SDKs) on one binary, and reads,
writes and repairs a running application's state through its state API.`,
		Version:       version(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Annotations: map[string]string{synopsisAnnotation: `run --module FILE [--data-dir DIR] [--admin-addr HOST:PORT] [flags]
run --module FILE --cluster-brokers HOST:PORT,... --cluster-app-id ID --cluster-node-id ID --cluster-advertise URL [--cluster-secret-file FILE] [flags]
state <command> [flags] <args>
backup --to DIR [flags]
backup verify DIR
version
completion bash|zsh|fish|powershell`},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q%s", args[0], suggest(cmd, args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			writeHelp(c.stderr, cmd)
			return exitError{2}
		},
	}
	root.SetVersionTemplate("statefun {{.Version}}\n")
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetIn(c.stdin)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) { writeHelp(c.stderr, cmd) })
	root.SetUsageFunc(func(cmd *cobra.Command) error { writeUsage(c.stderr, cmd); return nil })
	root.AddCommand(newRunCmd(c), newStateCmd(c), newJobsCmd(c), newBackupCmd(c), newVersionCmd(c), newGenDocsCmd(c))
	return root
}

// suggest returns cobra's "did you mean" for a mistyped command name.
func suggest(cmd *cobra.Command, name string) string {
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		return fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return ""
}

func newVersionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of statefun (also: statefun --version)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(c.stdout, "statefun", version())
			return err
		},
	}
}

// noArgs refuses positional arguments as a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// synopsis returns cmd's usage lines, each with the full command path.
// The lines of synopsisAnnotation start with the command's name (the
// root's, with a subcommand's).
func synopsis(cmd *cobra.Command) []string {
	s, ok := cmd.Annotations[synopsisAnnotation]
	if !ok {
		return []string{cmd.UseLine()}
	}
	prefix := cmd.CommandPath()
	if cmd.HasParent() {
		prefix = cmd.Parent().CommandPath()
	}
	var out []string
	for _, line := range strings.Split(s, "\n") {
		out = append(out, prefix+" "+line)
	}
	return out
}

// writeUsage prints cmd's usage lines and where to read more: what a
// usage error shows after its message.
func writeUsage(w io.Writer, cmd *cobra.Command) {
	lines := synopsis(cmd)
	if len(lines) == 1 {
		fmt.Fprintf(w, "Usage: %s\n", lines[0])
	} else {
		fmt.Fprintln(w, "Usage:")
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, "Run %q for %s.\n", cmd.CommandPath()+" --help", map[bool]string{true: "its commands and flags", false: "its flags"}[cmd.HasAvailableSubCommands()])
}

// writeHelp prints cmd's help: what -h and --help show.
func writeHelp(w io.Writer, cmd *cobra.Command) {
	text := cmd.Long
	if text == "" {
		text = cmd.Short
	}
	if text != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimRight(text, "\n"))
	}
	lines := synopsis(cmd)
	if len(lines) == 1 {
		fmt.Fprintf(w, "Usage: %s\n", lines[0])
	} else {
		fmt.Fprintln(w, "Usage:")
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		width := 0
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				width = max(width, len(sub.Name()))
			}
		}
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-*s  %s\n", width, sub.Name(), sub.Short)
			}
		}
	}
	if cmd.HasAvailableLocalFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", cmd.LocalFlags().FlagUsagesWrapped(0))
	}
	if cmd.HasAvailableInheritedFlags() {
		fmt.Fprintf(w, "\nGlobal flags (before or after the command):\n%s", cmd.InheritedFlags().FlagUsagesWrapped(0))
	}
	if foot := cmd.Annotations[footAnnotation]; foot != "" {
		fmt.Fprintf(w, "\n%s\n", foot)
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nRun \"%s <command> --help\" for a command's flags.\n", cmd.CommandPath())
	}
}

// footAnnotation holds text help prints after the flags.
const footAnnotation = "statefun-foot"
