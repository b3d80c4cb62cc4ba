package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// The inbox repair commands of `statefun state`: skip, edit-message,
// cancel, delete-address, skipped and resend (docs/state-api.md, "Repair:
// skip, edit, cancel, delete an address").

// repairFlags are the flags every inbox repair shares.
type repairFlags struct {
	reason string
	quiet  bool
}

func (c *stateCLI) repairFlagSet(name string, usage []string, f *repairFlags) *flag.FlagSet {
	fs := c.flagSet(name, usage)
	fs.StringVar(&f.reason, "reason", "", "why, recorded in the audit log")
	fs.BoolVar(&f.quiet, "q", false, "print nothing on success")
	fs.BoolVar(&f.quiet, "quiet", false, "same as -q")
	return fs
}

func (c *stateCLI) printRepair(f *repairFlags, rc *stateclient.RepairReceipt) error {
	if f.quiet {
		return nil
	}
	return writeJSON(c.stdout, rc)
}

// skip moves a message of an inbox to the message dead letters.
func (c *stateCLI) skip(args []string) error {
	var f repairFlags
	var key string
	fs := c.repairFlagSet("statefun state skip", []string{
		"statefun state skip [--key K] [--reason R] <namespace>/<type> <id>",
		"",
		"Moves a message out of the address's inbox to the message dead letters, where",
		"\"statefun state skipped\" lists it and \"statefun state resend\" sends it again.",
		"Without --key: the head of the inbox (the first message of the failed batch, or",
		"of a paused address the first queued message). Pause the address first.",
		"Prints the receipt; its deadLetter is the dead letter's id.",
	}, &f)
	fs.StringVar(&key, "key", "", "the message's inbox key as \"statefun state inbox\" shows it")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
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
	return c.printRepair(&f, rc)
}

// editMessage replaces a message's typename and value.
func (c *stateCLI) editMessage(args []string) error {
	var f repairFlags
	var key, typename, text, file string
	fs := c.repairFlagSet("statefun state edit-message", []string{
		"statefun state edit-message [--key K] --typename T (--text V | --file F) <namespace>/<type> <id>",
		"",
		"Replaces the typename and value of a message of the address's inbox (without",
		"--key: the head, as for skip); it keeps its place. --file - reads stdin. The value",
		"is taken as exact bytes: for a built-in type give its encoded form.",
	}, &f)
	fs.StringVar(&key, "key", "", "the message's inbox key")
	fs.StringVar(&typename, "typename", "", "the message's typename (the current one to keep it)")
	fs.StringVar(&text, "text", "", "the new value, as text")
	fs.StringVar(&file, "file", "", "read the new value from this file (- for stdin)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
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
	return c.printRepair(&f, rc)
}

// cancel drops a queued or a delayed message.
func (c *stateCLI) cancel(args []string) error {
	var f repairFlags
	var key, timer, sender, token string
	fs := c.repairFlagSet("statefun state cancel", []string{
		"statefun state cancel (--key K | --timer T | --sender <ns>/<type>/<id> --cancellation-token TOK) <namespace>/<type> <id>",
		"",
		"Drops a queued message (by its inbox key) or a pending delayed message for the",
		"address (by its timer, or its sender and cancellation token), as \"statefun state",
		"inbox\" shows them. \"statefun state revert <mutation>\" puts it back: a queued",
		"message at the end of the inbox, a delayed one due at its time.",
	}, &f)
	fs.StringVar(&key, "key", "", "a queued message's inbox key")
	fs.StringVar(&timer, "timer", "", "a delayed message's timer")
	fs.StringVar(&sender, "sender", "", "a delayed message's sender, <namespace>/<type>/<id>")
	fs.StringVar(&token, "cancellation-token", "", "with --sender, the delayed message's cancellation token")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
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
	return c.printRepair(&f, rc)
}

// deleteAddress deletes a paused address entirely.
func (c *stateCLI) deleteAddress(args []string) error {
	var f repairFlags
	fs := c.repairFlagSet("statefun state delete-address", []string{
		"statefun state delete-address [--reason R] <namespace>/<type> <id>",
		"",
		"Deletes every state entry of a paused address, its queued messages (and failed",
		"batch) and the delayed messages its partition holds for it or that it sent, in",
		"one commit. \"statefun state revert <mutation>\" puts it all back.",
	}, &f)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	a, err := target(pos, false)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.DeleteWholeAddress(c.ctx(), a, f.reason)
	if err != nil {
		return err
	}
	return c.printRepair(&f, rc)
}

// skipped lists the message dead letters, or prints one.
func (c *stateCLI) skipped(args []string) error {
	fs := c.flagSet("statefun state skipped", []string{
		"statefun state skipped [-o table|json] [--type <ns>/<type>]",
		"statefun state skipped <dead-letter-id>",
		"",
		"The messages operators skipped out of inboxes, oldest first (every page is",
		"fetched), or one of them as JSON.",
	})
	var output, typ string
	outputVar(fs, &output)
	fs.StringVar(&typ, "type", "", "only those of this function type")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		d, err := cl.MessageDeadLetter(c.ctx(), pos[0])
		if err != nil {
			return err
		}
		return writeJSON(c.stdout, d)
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
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSKIPPED\tADDRESS\tTYPENAME\tSIZE\tBY\tREASON")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s/%s %s\t%s\t%d\t%s\t%s\n", d.ID, d.SkippedAt.Local().Format("2006-01-02 15:04:05"),
			d.Address.Namespace, d.Address.Type, shellQuote(d.Address.ID), d.Typename, d.Value.Length, d.Principal, oneLine(d.Reason))
	}
	return tw.Flush()
}

// resend sends a skipped message again.
func (c *stateCLI) resend(args []string) error {
	var f repairFlags
	var to string
	fs := c.repairFlagSet("statefun state resend", []string{
		"statefun state resend [--to <ns>/<type>/<id>] [--reason R] <dead-letter-id>",
		"",
		"Sends a skipped message again, as a new message at the end of the inbox of its",
		"address (or of --to), with its caller and argument; the dead letter is gone then.",
	}, &f)
	fs.StringVar(&to, "to", "", "send it to this address instead, <namespace>/<type>/<id>")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
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
	if f.quiet {
		return nil
	}
	return writeJSON(c.stdout, out)
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
