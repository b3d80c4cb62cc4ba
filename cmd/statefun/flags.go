package main

// Flags: environment variables behind flags, the command line's
// normalization before cobra reads it, and flag errors in an operator's
// words.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envSource is where a command reads environment variables. main passes the
// process's environment; nothing reads it behind a command's back.
type envSource struct {
	lookup  func(string) (string, bool)
	environ func() []string
}

// processEnv is the process's environment.
func processEnv() envSource { return envSource{lookup: os.LookupEnv, environ: os.Environ} }

// envAnnotation is the pflag annotation that names a flag's environment
// variable; applyEnv and the reference generator read it.
const envAnnotation = "statefun-env"

// bindEnv makes the flag name of fs read the environment variable env when
// the command line does not give it, and says so in its help.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("bindEnv: no flag " + name) // a programming error, caught by every test
	}
	f.Usage += " (env " + env + ")"
	if err := fs.SetAnnotation(name, envAnnotation, []string{env}); err != nil {
		panic(err)
	}
}

// flagEnv returns the environment variable of f, or "".
func flagEnv(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// flagUsage returns f's help text without the environment variable bindEnv
// added to it.
func flagUsage(f *pflag.Flag) string {
	if env := flagEnv(f); env != "" {
		return strings.TrimSuffix(f.Usage, " (env "+env+")")
	}
	return f.Usage
}

// envSetter is a flag value that reads its environment variable in its own
// way (a list, where the flag is repeated).
type envSetter interface {
	SetEnv(string) error
}

// applyEnv gives every flag of fs that the command line did not set the
// value of its environment variable, when that is set: a flag beats its
// environment variable, which beats the default. A value that does not
// parse is a usage error naming the variable.
func applyEnv(fs *pflag.FlagSet, env envSource) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		name := flagEnv(f)
		if err != nil || name == "" || f.Changed {
			return
		}
		v, ok := env.lookup(name)
		if !ok {
			return
		}
		var serr error
		if s, ok := f.Value.(envSetter); ok {
			serr = s.SetEnv(v)
		} else {
			serr = f.Value.Set(v)
		}
		if serr == nil {
			return
		}
		switch f.Value.Type() {
		case "int":
			err = usagef("%s=%q is not a number", name, v)
		case "duration":
			err = usagef("%s=%q is not a duration like 24h", name, v)
		case "bool":
			err = usagef("%s=%q is not true or false", name, v)
		default:
			err = usagef("%s=%q: %v", name, v, serr)
		}
	})
	return err
}

// flagError is the FlagErrorFunc of every command: pflag's errors in the
// words the rest of the command line uses, as a usage error (exit 2).
func flagError(_ *cobra.Command, err error) error {
	var inv *pflag.InvalidValueError
	if errors.As(err, &inv) {
		f := inv.GetFlag()
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		return usagef("invalid value %q for %s: %s", inv.GetValue(), name, valueProblem(f, inv.Unwrap()))
	}
	return usagef("%s", err.Error())
}

// valueProblem says what a flag wants instead of a value that did not
// parse.
func valueProblem(f *pflag.Flag, err error) string {
	var num *strconv.NumError
	switch {
	case f.Value.Type() == "duration":
		return "want a duration like 30s, 10m or 24h"
	case f.Value.Type() == "bool":
		return "want true or false"
	case errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange):
		return "out of range"
	case errors.As(err, &num):
		return "want a whole number"
	}
	return err.Error()
}

// choiceValue is a string flag that takes one of a few words; anything else
// is refused when the flag is parsed, naming the flag.
type choiceValue struct {
	p       *string
	choices []string
}

// choiceVarP registers a choice flag with its default.
func choiceVarP(fs *pflag.FlagSet, p *string, name, shorthand, def string, choices []string, usage string) {
	*p = def
	fs.VarP(&choiceValue{p, choices}, name, shorthand, usage)
}

func (c *choiceValue) String() string { return *c.p }
func (c *choiceValue) Type() string   { return "format" }
func (c *choiceValue) Set(s string) error {
	for _, ch := range c.choices {
		if s == ch {
			*c.p = s
			return nil
		}
	}
	return errors.New("want " + orList(c.choices))
}

// orList returns "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// outputVarP registers -o/--output: one of choices, def by default.
func outputVarP(fs *pflag.FlagSet, p *string, def string, choices ...string) {
	choiceVarP(fs, p, "output", "o", def, choices, "output: "+orList(choices))
}

// positionalAnnotation marks a command whose arguments may hold anything,
// a negative number or "-" included, among its flags (the state commands).
const positionalAnnotation = "statefun-positional"

// normalizeArgs prepares a command line for cobra:
//
//   - a long flag with one dash (-module, as the standard flag package
//     reads it) gets its second dash, and a shorthand with two (--o) loses
//     one, so that command lines written for earlier versions still work;
//   - for a command marked positionalAnnotation, its flags are moved before
//     its arguments and the arguments put after "--": an argument that
//     looks like a negative number ("-5") or is "-" stays an argument, and
//     flags may come before or after the command name and the arguments.
//
// An argument after "--" is never a flag. A flag's value is never moved
// away from its flag, whatever it looks like ("--limit -1").
func normalizeArgs(root *cobra.Command, args []string) []string {
	if len(args) > 0 && strings.HasPrefix(args[0], "__complete") {
		return args // shell completion parses its own way
	}
	long, short := map[string]*pflag.Flag{}, map[string]*pflag.Flag{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if _, ok := long[f.Name]; !ok {
					long[f.Name] = f
				}
				if _, ok := short[f.Shorthand]; !ok && f.Shorthand != "" {
					short[f.Shorthand] = f
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)

	cmd := root
	var names, flags, pos, same []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			same = append(same, args[i:]...)
			break
		}
		if isFlagToken(a) || len(a) == 2 && isNegativeNumber(a) && cmd.Flags().ShorthandLookup(a[1:]) != nil {
			a = canonicalFlag(a, long, short)
			flags = append(flags, a)
			same = append(same, a)
			if takesValue(a, long, short) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
				same = append(same, args[i])
			}
			continue
		}
		same = append(same, a)
		if len(pos) == 0 {
			if sub := subcommand(cmd, a); sub != nil {
				cmd = sub
				names = append(names, a)
				continue
			}
		}
		pos = append(pos, a)
	}
	if cmd.Annotations[positionalAnnotation] == "" || len(pos) == 0 {
		return same
	}
	out := append(append(names, flags...), "--")
	return append(out, pos...)
}

// subcommand returns c's subcommand called name, or nil.
func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}

// isFlagToken reports whether a command-line word is a flag: it starts
// with '-' and is neither "-" nor a negative number.
func isFlagToken(s string) bool {
	return len(s) > 1 && s[0] == '-' && !isNegativeNumber(s)
}

func isNegativeNumber(s string) bool {
	return len(s) >= 2 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.' && len(s) > 2 && s[2] >= '0' && s[2] <= '9')
}

// canonicalFlag returns -name as --name when name is a long flag, and --x
// as -x when x is only a shorthand.
func canonicalFlag(s string, long, short map[string]*pflag.Flag) string {
	if strings.HasPrefix(s, "--") {
		name, _, _ := strings.Cut(s[2:], "=")
		if len(name) == 1 && long[name] == nil && short[name] != nil {
			return s[1:]
		}
		return s
	}
	name, _, _ := strings.Cut(s[1:], "=")
	if len(name) > 1 && long[name] != nil {
		return "-" + s
	}
	return s
}

// takesValue reports whether the flag word s (canonical) takes the next
// word as its value.
func takesValue(s string, long, short map[string]*pflag.Flag) bool {
	if strings.Contains(s, "=") {
		return false
	}
	if strings.HasPrefix(s, "--") {
		f := long[s[2:]]
		return f != nil && f.NoOptDefVal == ""
	}
	// A group of shorthands: the first that takes a value takes the rest of
	// the word, or the next word when it is last.
	for i := 1; i < len(s); i++ {
		f := short[s[i:i+1]]
		if f == nil {
			return false
		}
		if f.NoOptDefVal == "" {
			return i == len(s)-1
		}
	}
	return false
}

// secretValue is a string flag whose value help and the reference never
// show.
type secretValue struct{ p *string }

func (s secretValue) String() string     { return "" }
func (s secretValue) Set(v string) error { *s.p = v; return nil }
func (s secretValue) Type() string       { return "string" }

// timeLayout is the one format of times in human output: RFC 3339 in UTC,
// to the millisecond, always three digits so that columns line up. It is
// what --since, --until, --as-of-time and --until of pause read back, and
// it reads the same on every node and in every operator's time zone.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// formatTime renders t for human output; "-" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// formatTimePtr is formatTime of an optional time.
func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

// usageError is wrong usage: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError ends a command with code after it has printed what it had to.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// runtimeError is a failure of the runtime's start: printed after
// "statefun: ", exit code 1.
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }
