package main

// How the state commands print: tables for people (the default), JSON for
// scripts (-o json), times in one format (formatTime).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// writeJSON writes v as indented JSON and a newline, HTML characters
// unescaped.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns the tabwriter every table is written with.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// oneLine returns s with control characters escaped, for a table cell.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// receiptRow is one receipt of a table, with the dead letter a skip made.
type receiptRow struct {
	stateclient.Receipt
	deadLetter string
}

// writeReceiptTable writes receipts as a table: the mutation (what revert
// and receipt take), its status, the entry's version after it, the
// checkpoint and commit that carry it (what restore --as-of takes) and
// why a mutation was rejected or failed.
func writeReceiptTable(w io.Writer, rows []receiptRow) error {
	dead := false
	for _, r := range rows {
		dead = dead || r.deadLetter != ""
	}
	tw := newTable(w)
	head := "MUTATION\tSTATUS\tVERSION\tCHECKPOINT\tCOMMIT\tREASON"
	if dead {
		head += "\tDEAD LETTER"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		checkpoint := "-"
		if r.Checkpoint != nil {
			checkpoint = strconv.FormatUint(*r.Checkpoint, 10)
		}
		version := orDash(r.Version)
		if r.PreviousVersion != "" {
			version = r.PreviousVersion + "→" + version
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", r.Mutation, r.Status, version, checkpoint, orDash(r.Commit), orDash(oneLine(r.Reason)))
		if dead {
			line += "\t" + orDash(r.deadLetter)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// printReceipts prints receipts unless quiet: a table, or with -o json one
// object (an array for more than one).
func (c *stateCLI) printReceipts(m *mutationFlags, rs ...stateclient.Receipt) error {
	if m.quiet {
		return nil
	}
	if m.output == "json" {
		if len(rs) == 1 {
			return writeJSON(c.stdout, rs[0])
		}
		return writeJSON(c.stdout, rs)
	}
	rows := make([]receiptRow, len(rs))
	for i, r := range rs {
		rows[i] = receiptRow{Receipt: r}
	}
	return writeReceiptTable(c.stdout, rows)
}

// printRepair prints the receipt of an inbox repair.
func (c *stateCLI) printRepair(f *repairFlags, rc *stateclient.RepairReceipt) error {
	switch {
	case f.quiet:
		return nil
	case f.output == "json":
		return writeJSON(c.stdout, rc)
	}
	return writeReceiptTable(c.stdout, []receiptRow{{rc.Receipt, rc.DeadLetter}})
}

// writeFields writes name/value pairs as two aligned columns.
func writeFields(w io.Writer, fields [][2]string) error {
	tw := newTable(w)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s\t%s\n", f[0], f[1])
	}
	return tw.Flush()
}

// jsonAddress names a repair route's address: example/person Bob.
func jsonAddress(a *stateclient.JSONAddress) string {
	if a == nil {
		return "-"
	}
	return a.Namespace + "/" + a.Type + " " + shellQuote(a.ID)
}

// describePause says who paused, when, why and until when.
func describePause(p *stateclient.Pause) string {
	if p == nil {
		return "no"
	}
	s := fmt.Sprintf("since %s by %s", formatTime(p.Since), p.Principal)
	if p.Auto {
		s += " (poison policy)"
	}
	if p.Reason != "" {
		s += ": " + oneLine(p.Reason)
	}
	if p.ExpiresAt != nil {
		s += "; lifts at " + formatTime(*p.ExpiresAt)
	}
	return s
}

// writeInbox writes what the runtime holds for an address: its pauses, the
// batch in flight, then its messages and delayed messages as tables.
func writeInbox(w io.Writer, in *stateclient.Inbox) error {
	inflight := "-"
	if f := in.Inflight; f != nil {
		inflight = fmt.Sprintf("attempt %d", f.Attempt)
		if f.Waiting {
			inflight += ", waiting to retry"
		}
		if f.Since != nil {
			inflight += ", failing since " + formatTime(*f.Since)
		}
		if f.NextAttempt != nil {
			inflight += ", next attempt " + formatTime(*f.NextAttempt)
		}
		if f.Violation {
			inflight += ", protocol violation"
		}
		if f.LastError != "" {
			inflight += ", last error: " + oneLine(f.LastError)
		}
	}
	queued := fmt.Sprintf("%d", in.Queued.Count)
	if in.Queued.OldestAt != nil {
		queued += ", oldest arrived " + formatTime(*in.Queued.OldestAt)
	}
	if n := in.Queued.PagedInPartition; n > 0 {
		queued += fmt.Sprintf("; %d more of the partition wait in the store", n)
	}
	if in.Queued.Truncated {
		queued += fmt.Sprintf(" (%d listed)", len(in.Queued.Messages))
	}
	if err := writeFields(w, [][2]string{
		{"ADDRESS", jsonAddress(&in.Address)},
		{"PAUSED", describePause(in.Paused)},
		{"TYPE PAUSED", describePause(in.TypePaused)},
		{"IN FLIGHT", inflight},
		{"QUEUED", queued},
		{"DELAYED", strconv.Itoa(len(in.Delayed))},
	}); err != nil {
		return err
	}
	var inflightMsgs []stateclient.InboxMessage
	if in.Inflight != nil {
		inflightMsgs = in.Inflight.Messages
	}
	if len(inflightMsgs)+len(in.Queued.Messages) > 0 {
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "WHERE\tKEY\tTYPENAME\tCALLER\tSIZE\tVALUE\tARRIVED")
		for _, set := range []struct {
			where string
			msgs  []stateclient.InboxMessage
		}{{"in flight", inflightMsgs}, {"queued", in.Queued.Messages}} {
			for _, m := range set.msgs {
				caller := "ingress"
				if m.Caller != nil {
					caller = jsonAddress(m.Caller)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", set.where, m.Key, m.Typename, caller, m.Size, messageValue(m.Value), formatTime(m.ArrivedAt))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(in.Delayed) > 0 {
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "TIMER\tDUE\tTYPENAME\tSENDER\tTOKEN\tSIZE")
		for _, d := range in.Delayed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", d.Timer, formatTime(d.DueAt), d.Typename, jsonAddress(d.Sender), orDash(d.Token), d.Size)
		}
		return tw.Flush()
	}
	return nil
}

// writeMessageDeadLetter writes one skipped message, field by field.
func writeMessageDeadLetter(w io.Writer, d *stateclient.MessageDeadLetter) error {
	value := fmt.Sprintf("(%d bytes, not UTF-8)", d.Value.Length)
	if d.Value.Text != nil {
		value = strconv.Quote(*d.Value.Text)
	}
	caller := "ingress"
	if d.Caller != nil {
		caller = jsonAddress(d.Caller)
	}
	return writeFields(w, [][2]string{
		{"ID", d.ID},
		{"SKIPPED", formatTime(d.SkippedAt)},
		{"ADDRESS", jsonAddress(&d.Address)},
		{"INBOX KEY", d.InboxKey},
		{"CALLER", caller},
		{"TYPENAME", d.Typename},
		{"SIZE", strconv.Itoa(d.Value.Length)},
		{"VALUE", value},
		{"BY", d.Principal},
		{"REASON", orDash(oneLine(d.Reason))},
		{"ATTEMPTS", strconv.Itoa(d.Attempts)},
		{"LAST ERROR", orDash(oneLine(d.LastError))},
	})
}

// maxValueColumn bounds the characters of a message's value in the inbox
// table; -o json has all the API gives.
const maxValueColumn = 40

// messageValue renders a waiting message's value for the inbox table: its
// JSON, else its text when the bytes are UTF-8, else its length; cut to
// maxValueColumn characters ("…" marks a cut, or a value longer than the
// API showed). "-" for an operator mutation.
func messageValue(v *stateclient.MessageValue) string {
	if v == nil {
		return "-"
	}
	var s string
	raw, err := base64.StdEncoding.DecodeString(v.Base64)
	switch {
	case len(v.JSON) > 0:
		var compact bytes.Buffer
		if json.Compact(&compact, v.JSON) == nil {
			s = compact.String()
		} else {
			s = string(v.JSON)
		}
	case err == nil && utf8.Valid(raw):
		s = string(raw)
	case err == nil:
		s = fmt.Sprintf("<%d bytes>", len(raw))
	}
	s = oneLine(s)
	cut := v.Truncated
	if r := []rune(s); len(r) > maxValueColumn {
		s, cut = string(r[:maxValueColumn]), true
	}
	if cut {
		s += "…"
	}
	if s == "" {
		return `""`
	}
	return s
}
