package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// The inbox repair commands of `statefun state`: skip, edit-message,
// cancel, delete-address, skipped and resend (docs/how-to/repair.md,
// "Repair").

// repairFlags are the flags every inbox repair shares.
type repairFlags struct {
	reason string
	quiet  bool
	output string
}

// register registers --reason, -q and -o on fs.
func (f *repairFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.reason, "reason", "", "why, recorded in the audit log")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing on success")
	outputVarP(fs, &f.output, "table", "table", "json")
}

// skipCmd moves a message of an inbox to the message dead letters.
func (c *stateCLI) skipCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skip [--key K] [--reason R] <namespace>/<type> <id>",
		Short: "Move a message (the head) to the message dead letters",
		Long: `Moves a message out of the address's inbox to the message dead letters, where
"statefun state skipped" lists it and "statefun state resend" sends it again.
Without --key: the head of the inbox (the first message of the failed batch, or
of a paused address the first queued message). Pause the address first. Prints
the receipt with the dead letter's id.`,
	}
	var (
		f   repairFlags
		key string
	)
	cmd.Flags().StringVar(&key, "key", "", "the message's inbox key as \"statefun state inbox\" shows it")
	f.register(cmd.Flags())
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.skip(pos, &f, key) })
}

func (c *stateCLI) skip(pos []string, f *repairFlags, key string) error {
	a, err := target(pos, false)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.Skip(c.ctx(), a, key, f.reason)
	if err != nil {
		return err
	}
	return c.printRepair(f, rc)
}

// editMessageCmd replaces a message's typename and value.
func (c *stateCLI) editMessageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "edit-message [--key K] --typename T (--text V | --file F) <namespace>/<type> <id>",
		Short: "Replace a queued message's typename and value",
		Long: `Replaces the typename and value of a message of the address's inbox (without
--key: the head, as for skip); it keeps its place. --file - reads stdin. The
value is taken as exact bytes: for a built-in type give its encoded form.`,
	}
	var (
		f                         repairFlags
		key, typename, text, file string
	)
	fs := cmd.Flags()
	fs.StringVar(&key, "key", "", "the message's inbox key")
	fs.StringVar(&typename, "typename", "", "the message's typename (the current one to keep it)")
	fs.StringVar(&text, "text", "", "the new value, as text")
	fs.StringVar(&file, "file", "", "read the new value from this file (- for stdin)")
	f.register(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		return c.editMessage(pos, &f, key, typename, text, file)
	})
}

func (c *stateCLI) editMessage(pos []string, f *repairFlags, key, typename, text, file string) error {
	a, err := target(pos, false)
	if err != nil {
		return err
	}
	if typename == "" {
		return usagef("--typename is required")
	}
	var value []byte
	switch {
	case text != "" && file != "":
		return usagef("give --text or --file, not both")
	case file == "-":
		if value, err = io.ReadAll(c.stdin); err != nil {
			return err
		}
	case file != "":
		if value, err = os.ReadFile(file); err != nil {
			return err
		}
	default:
		value = []byte(text)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.EditMessage(c.ctx(), a, key, typename, value, f.reason)
	if err != nil {
		return err
	}
	return c.printRepair(f, rc)
}

// cancelCmd drops a queued or a delayed message.
func (c *stateCLI) cancelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel (--key K | --timer T | --sender <ns>/<type>/<id> --cancellation-token TOK) <namespace>/<type> <id>",
		Short: "Drop a queued or a delayed message (revertible)",
		Long: `Drops a queued message (by its inbox key) or a pending delayed message for the
address (by its timer, or its sender and cancellation token), as "statefun state
inbox" shows them. "statefun state revert <mutation>" puts it back: a queued
message at the end of the inbox, a delayed one due at its time.`,
	}
	var (
		f                         repairFlags
		key, timer, sender, token string
	)
	fs := cmd.Flags()
	fs.StringVar(&key, "key", "", "a queued message's inbox key")
	fs.StringVar(&timer, "timer", "", "a delayed message's timer")
	fs.StringVar(&sender, "sender", "", "a delayed message's sender, <namespace>/<type>/<id>")
	fs.StringVar(&token, "cancellation-token", "", "with --sender, the delayed message's cancellation token")
	f.register(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		return c.cancel(pos, &f, key, timer, sender, token)
	})
}

func (c *stateCLI) cancel(pos []string, f *repairFlags, key, timer, sender, token string) error {
	a, err := target(pos, false)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var rc *stateclient.RepairReceipt
	switch {
	case key != "" && (timer != "" || sender != "" || token != ""):
		return usagef("--key names a queued message; --timer, or --sender and --cancellation-token, a delayed one")
	case key != "":
		rc, err = cl.CancelMessage(c.ctx(), a, key, f.reason)
	case timer != "" || sender != "" || token != "":
		d := stateclient.DelayedRef{Timer: timer, Token: token}
		if sender != "" {
			s, perr := parseAddressArg(sender)
			if perr != nil {
				return usagef("--sender %q: want <namespace>/<type>/<id>", sender)
			}
			d.Sender = &s
		}
		rc, err = cl.CancelDelayed(c.ctx(), a, d, f.reason)
	default:
		return usagef("give --key, --timer, or --sender and --cancellation-token")
	}
	if err != nil {
		return err
	}
	return c.printRepair(f, rc)
}

// deleteAddressCmd deletes a paused address entirely.
func (c *stateCLI) deleteAddressCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete-address [--yes] [--reason R] <namespace>/<type> <id>",
		Short: "Drop a paused address's state, inbox and timers (revertible)",
		Long: `Deletes every state entry of a paused address, its queued messages (and failed
batch) and the delayed messages its partition holds for it or that it sent, in
one commit. It asks for confirmation on a terminal; without one it needs --yes.
"statefun state revert <mutation>" puts it all back.`,
	}
	var (
		f   repairFlags
		yes bool
	)
	yesFlag(cmd.Flags(), &yes, "delete")
	f.register(cmd.Flags())
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.deleteAddress(pos, &f, yes) })
}

func (c *stateCLI) deleteAddress(pos []string, f *repairFlags, yes bool) error {
	a, err := target(pos, false)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := c.confirmDestructive(yes, fmt.Sprintf("Delete %s: every state entry, its queued messages and its delayed messages?", describeAddress(a))); err != nil {
		return err
	}
	rc, err := cl.DeleteWholeAddress(c.ctx(), a, f.reason)
	if err != nil {
		return err
	}
	return c.printRepair(f, rc)
}

// skippedCmd lists the message dead letters, or prints one.
func (c *stateCLI) skippedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skipped [-o table|json] [--type <ns>/<type>] [<dead-letter-id>]",
		Short: "The skipped messages (message dead letters), or one of them",
		Long: `Lists the messages operators skipped out of inboxes, oldest first (every page is
fetched), or shows one of them with its value.`,
		Annotations: map[string]string{synopsisAnnotation: "skipped [-o table|json] [--type <namespace>/<type>]\nskipped [-o table|json] <dead-letter-id>"},
	}
	var output, typ string
	fs := cmd.Flags()
	fs.StringVar(&typ, "type", "", "only those of this function type")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.skipped(pos, output, typ) })
}

func (c *stateCLI) skipped(pos []string, output, typ string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		d, err := cl.MessageDeadLetter(c.ctx(), pos[0])
		if err != nil {
			return err
		}
		if output == "json" {
			return writeJSON(c.stdout, d)
		}
		return writeMessageDeadLetter(c.stdout, d)
	}
	if len(pos) > 1 {
		return usagef("want at most one dead letter id")
	}
	var t stateclient.TypeName
	if typ != "" {
		if t, err = stateclient.ParseTypeName(typ); err != nil {
			return usagef("--type %q: want <namespace>/<type>", typ)
		}
	}
	list := []stateclient.MessageDeadLetter{}
	after := ""
	for {
		p, err := cl.MessageDeadLetters(c.ctx(), t, after, 1000)
		if err != nil {
			return err
		}
		list = append(list, p.DeadLetters...)
		if after = p.Next; after == "" {
			break
		}
	}
	if output == "json" {
		return writeJSON(c.stdout, list)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "ID\tSKIPPED\tADDRESS\tTYPENAME\tSIZE\tBY\tREASON")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s/%s %s\t%s\t%d\t%s\t%s\n", d.ID, formatTime(d.SkippedAt),
			d.Address.Namespace, d.Address.Type, shellQuote(d.Address.ID), d.Typename, d.Value.Length, d.Principal, oneLine(d.Reason))
	}
	return tw.Flush()
}

// resendCmd sends a skipped message again.
func (c *stateCLI) resendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resend [--to <ns>/<type>/<id>] [--reason R] <dead-letter-id>",
		Short: "Send a skipped message again",
		Long: `Sends a skipped message again, as a new message at the end of the inbox of its
address (or of --to), with its caller and argument; the dead letter is gone
then.`,
	}
	var (
		f  repairFlags
		to string
	)
	cmd.Flags().StringVar(&to, "to", "", "send it to this address instead, <namespace>/<type>/<id>")
	f.register(cmd.Flags())
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.resend(pos, &f, to) })
}

func (c *stateCLI) resend(pos []string, f *repairFlags, to string) error {
	if len(pos) != 1 {
		return usagef("want one <dead-letter-id>")
	}
	var target *stateclient.Address
	if to != "" {
		a, err := parseAddressArg(to)
		if err != nil {
			return usagef("--to %q: want <namespace>/<type>/<id>", to)
		}
		target = &a
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	out, err := cl.Resend(c.ctx(), pos[0], target, f.reason)
	if err != nil {
		return err
	}
	switch {
	case f.quiet:
		return nil
	case f.output == "json":
		return writeJSON(c.stdout, out)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "MUTATION\tSTATUS\tTO\tINBOX KEY")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", out.Mutation, out.Status, jsonAddress(&out.Address), orDash(out.InboxKey))
	return tw.Flush()
}

// parseAddressArg reads "<namespace>/<type>/<id>": the id is everything
// after the second '/', so it may hold '/' itself.
func parseAddressArg(s string) (stateclient.Address, error) {
	parts := strings.SplitN(s, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return stateclient.Address{}, fmt.Errorf("%q is not <namespace>/<type>/<id>", s)
	}
	return stateclient.Address{Namespace: parts[0], Type: parts[1], ID: parts[2]}, nil
}
