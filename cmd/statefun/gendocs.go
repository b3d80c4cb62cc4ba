package main

// The command-line reference, docs/reference/cli.md, is generated from the
// commands themselves, and the metrics reference, docs/reference/metrics.md,
// from the metric definitions in internal/: `go run ./cmd/statefun gen-docs`
// (or go generate ./cmd/statefun) writes both, and TestReferenceIsGenerated
// and TestMetricsReferenceIsGenerated fail when a committed page differs
// from what the code would write.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/internal/metricsdoc"
)

// referencePath is where gen-docs writes the reference, from the
// repository's root.
const referencePath = "docs/reference/cli.md"

// metricsPath is where gen-docs writes the metrics reference, from the
// repository's root.
const metricsPath = "docs/reference/metrics.md"

// regenerateCommand is the command that rewrites the references.
const regenerateCommand = "go run ./cmd/statefun gen-docs"

func newGenDocsCmd(c *cli) *cobra.Command {
	var out, root string
	cmd := &cobra.Command{
		Use:    "gen-docs [--root DIR] [--out FILE]",
		Short:  "Write the command-line and metrics references (" + referencePath + ", " + metricsPath + ") from the code",
		Hidden: true,
		Args:   noArgs,
		RunE: func(*cobra.Command, []string) error {
			var buf bytes.Buffer
			if err := writeReference(&buf); err != nil {
				return err
			}
			if out == "-" {
				_, err := c.stdout.Write(buf.Bytes())
				return err
			}
			if out == "" {
				out = filepath.Join(root, referencePath)
			}
			var mbuf bytes.Buffer
			if err := writeMetricsReference(&mbuf, root); err != nil {
				return err
			}
			for _, p := range []struct {
				path string
				data []byte
			}{{out, buf.Bytes()}, {filepath.Join(root, metricsPath), mbuf.Bytes()}} {
				if err := os.MkdirAll(filepath.Dir(p.path), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p.path, p.data, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", ".", "the repository's root: the metrics are read from its internal/, the pages written under its docs/reference/")
	cmd.Flags().StringVar(&out, "out", "", "the file of the command-line reference (default: "+referencePath+" under --root); - writes it alone to stdout")
	return cmd
}

// writeMetricsReference writes the metrics reference of the source tree at
// root.
func writeMetricsReference(w io.Writer, root string) error {
	ms, err := metricsdoc.Scan(root)
	if err != nil {
		return err
	}
	return metricsdoc.Write(w, ms, regenerateCommand)
}

// writeReference writes the reference of a fresh command tree: every
// command, its usage, flags, environment variables and defaults. It reads
// nothing of the environment, so it is the same on every machine.
func writeReference(w io.Writer) error {
	c := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		env:      envSource{lookup: func(string) (string, bool) { return "", false }, environ: func() []string { return nil }},
		terminal: func(any) bool { return false }}
	root := newRootCmd(c)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()

	var b strings.Builder
	b.WriteString(`# Command-line reference

<!-- Generated from cmd/statefun by "` + regenerateCommand + `"; do not edit.
     make test fails when this page differs from what the code generates. -->

Every command of the ` + "`statefun`" + ` binary, with its flags, their environment
variables and defaults. ` + "`statefun <command> --help`" + ` prints the same on the
command line.

- **Precedence.** A flag on the command line beats its environment variable,
  which beats the default. A variable whose value does not parse is refused at
  start, naming it (exit status 2).
- **Flag syntax.** ` + "`--name value`" + `, ` + "`--name=value`" + ` and, for one-letter
  flags, ` + "`-o json`" + ` or ` + "`-ojson`" + `; a long flag written with one dash
  (` + "`-module`" + `) is read as ` + "`--module`" + `. The flags of ` + "`statefun state`" + `
  commands may come before or after the command and its arguments
  (` + "`statefun --server URL state get ...`" + ` works); an argument that is a
  negative number (` + "`-5`" + `) or ` + "`-`" + ` stays an argument; put an argument that
  starts with ` + "`-`" + ` after ` + "`--`" + `.
- **Output.** The ` + "`state`" + ` commands print a table for people (` + "`-o table`" + `,
  the default) or JSON for scripts (` + "`-o json`" + `, stable: the state API's own
  JSON). ` + "`get`" + ` prints the value itself by default, ` + "`ls`" + ` one name per line.
  Times in tables are RFC 3339 in UTC to the millisecond
  (` + "`2026-05-06T07:08:09.123Z`" + `): the form ` + "`--since`" + `, ` + "`--until`" + ` and
  ` + "`--as-of-time`" + ` read back, the same on every node and in every time zone.
- **Confirmation.** ` + "`state delete --all`" + `, ` + "`state restore`" + ` and
  ` + "`state delete-address`" + ` delete or overwrite a whole instance: on a terminal
  they ask first; when stdin is not a terminal they refuse (exit status 2)
  unless given ` + "`--yes`" + `.
- **Exit status.** 0 done; 1 failed (not found, condition failed, refused, no
  server, the runtime stopped on an error); 2 wrong usage (an unknown command or
  flag, a missing argument, a value that does not parse), with the message
  naming the flag and the command's usage line.
- **Shell completion.** ` + "`statefun completion bash|zsh|fish|powershell`" + ` prints
  a completion script for commands and flags; e.g.
  ` + "`source <(statefun completion bash)`" + `, or see
  ` + "`statefun completion bash --help`" + ` to install it for good.

`)
	b.WriteString("## Commands\n\n")
	var all []*cobra.Command
	var collect func(*cobra.Command)
	collect = func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" {
			return
		}
		all = append(all, cmd)
		for _, sub := range cmd.Commands() {
			collect(sub)
		}
	}
	collect(root)
	for _, cmd := range all {
		fmt.Fprintf(&b, "- [`%s`](#%s) — %s\n", cmd.CommandPath(), anchor(cmd.CommandPath()), mdText(cmd.Short))
	}
	for _, cmd := range all {
		writeCommandReference(&b, cmd)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// anchor is the heading id GitHub gives "## statefun state get".
func anchor(path string) string { return strings.ReplaceAll(path, " ", "-") }

func writeCommandReference(b *strings.Builder, cmd *cobra.Command) {
	fmt.Fprintf(b, "\n## %s\n\n", cmd.CommandPath())
	text := cmd.Long
	if text == "" {
		text = cmd.Short
	}
	if text != "" {
		fmt.Fprintf(b, "%s\n\n", mdText(strings.TrimSpace(text)))
	}
	b.WriteString("```\n")
	for _, l := range synopsis(cmd) {
		b.WriteString(l + "\n")
	}
	b.WriteString("```\n")
	if cmd.HasAvailableSubCommands() {
		b.WriteString("\nCommands:\n\n")
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(b, "- [`%s`](#%s) — %s\n", sub.Name(), anchor(sub.CommandPath()), mdText(sub.Short))
			}
		}
	}
	local := visibleFlags(cmd.LocalFlags())
	if len(local) > 0 {
		b.WriteString("\n" + flagTable(local))
	}
	if p := cmd.Parent(); p != nil && p.HasAvailablePersistentFlags() && cmd.Name() != "help" {
		if inherited := visibleFlags(cmd.InheritedFlags()); len(inherited) > 0 && p.Parent() != nil {
			fmt.Fprintf(b, "\nAnd the flags of [`%s`](#%s).\n", p.CommandPath(), anchor(p.CommandPath()))
		}
	}
	if foot := cmd.Annotations[footAnnotation]; foot != "" {
		fmt.Fprintf(b, "\n%s\n", mdText(foot))
	}
}

// visibleFlags returns fs's flags that are not hidden, help and version
// left out (every command has --help).
func visibleFlags(fs *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			out = append(out, f)
		}
	})
	return out
}

// flagTable renders flags as a Markdown table: flag, environment variable,
// default, meaning.
func flagTable(flags []*pflag.Flag) string {
	var b strings.Builder
	b.WriteString("| flag | env | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		name, usage := pflag.UnquoteUsage(f)
		usage = flagUsage(&pflag.Flag{Usage: usage, Annotations: f.Annotations})
		flag := "--" + f.Name
		if f.Shorthand != "" {
			flag = "-" + f.Shorthand + ", " + flag
		}
		if name != "" {
			flag += " " + name
		}
		env := ""
		if e := flagEnv(f); e != "" {
			env = "`" + e + "`"
		}
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
		case f.Value.Type() == "duration":
			def = "`" + shortDuration(def) + "`"
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", flag, env, def, mdCell(usage))
	}
	return b.String()
}

// mdCell escapes s for a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(mdText(s))
}

// mdText escapes what Markdown would read as HTML or emphasis in prose;
// lines indented as code are left as they are.
func mdText(s string) string {
	esc := strings.NewReplacer("<", "&lt;", ">", "&gt;", "*", `\*`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "    ") {
			lines[i] = esc.Replace(l)
		}
	}
	return strings.Join(lines, "\n")
}

// shortDuration drops the zero minutes and seconds Go prints: 24h0m0s is
// 24h, 1m0s is 1m.
func shortDuration(s string) string {
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
