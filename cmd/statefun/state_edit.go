package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// editCmd opens $EDITOR on an entry's JSON envelope and writes the edited
// value back on the condition that the entry has not changed since
// (If-Match of the version fetched).
func (c *stateCLI) editCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "edit [--yes] [--reason R] [--ack A] <namespace>/<type> <id> <state>",
		Short: "Edit a value's JSON envelope in $EDITOR; it is written back with If-Match",
		Long: `Fetches the entry's JSON envelope into a temporary file and opens $EDITOR on it
($VISUAL when EDITOR is unset, else vi; EDITOR may carry arguments, "code -w").
Edit "value" (the value as JSON), "valueBase64" (the exact bytes) or "typename".
The change is shown as a diff on stderr and, on a terminal, confirmed; without a
terminal on stdin --yes is required. It is written only if the entry still has
the version fetched: if it changed meanwhile nothing is written and the exit
status is 1. An unchanged or empty file writes nothing (exit status 0).`,
	}
	var (
		m   mutationFlags
		yes bool
	)
	yesFlag(cmd.Flags(), &yes, "write the change")
	m.register(cmd.Flags())
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.edit(pos, &m, yes) })
}

func (c *stateCLI) edit(pos []string, m *mutationFlags, yes bool) error {
	a, state, err := entryArgs(pos)
	if err != nil {
		return err
	}
	ack, err := m.ackMode()
	if err != nil {
		return err
	}
	if !yes && !c.terminal(c.stdin) {
		return usagef("stdin is not a terminal, so the change cannot be confirmed: pass --yes to write it without asking")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	env, err := cl.GetEnvelope(c.ctx(), a, state)
	if err != nil {
		if stateclient.IsNotFound(err) {
			return withHint(err, "edit changes an existing value; use put to create one")
		}
		return err
	}
	orig, err := editFile(a, state, env)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "statefun-edit-*.json")
	if err != nil {
		return err
	}
	path := f.Name()
	keep := false
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()
	_, err = f.Write(orig)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := c.runEditor(path); err != nil {
		return err
	}
	edited, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Equal(edited, orig) {
		fmt.Fprintf(c.stderr, "no change: %s was not written\n", describeEntry(a, state))
		return nil
	}
	saved := func(err error) error {
		keep = true
		return withHint(err, "your edit is saved in "+path)
	}
	ch, err := changeOf(env, edited)
	if err != nil {
		return saved(err)
	}
	if ch == nil {
		fmt.Fprintf(c.stderr, "no change: %s was not written\n", describeEntry(a, state))
		return nil
	}
	fmt.Fprint(c.stderr, unifiedDiff(
		fmt.Sprintf("%s (version %s)", describeEntry(a, state), env.Version), "edited",
		ch.oldText, ch.newText))
	if !yes {
		ok, err := c.confirm(fmt.Sprintf("Write this to %s? [y/N] ", describeEntry(a, state)))
		if err != nil {
			return saved(err)
		}
		if !ok {
			return saved(errors.New("not written"))
		}
	}
	rc, err := cl.Put(c.ctx(), a, state, ch.body, "application/json",
		stateclient.PutOptions{IfMatch: env.Version, Ack: ack, Reason: m.reason})
	if err != nil {
		if stateclient.IsPreconditionFailed(err) {
			var p *stateclient.ProblemError
			errors.As(err, &p)
			now := "it has no value now"
			if p.CurrentVersion != "" {
				now = "it is at version " + p.CurrentVersion
			}
			return saved(fmt.Errorf("%s changed while you edited it (you edited version %s; %s): nothing was written; run edit again",
				describeEntry(a, state), env.Version, now))
		}
		return saved(err)
	}
	if rc.Status == "accepted" {
		fmt.Fprintf(c.stderr, "accepted: %s will be written (if still at version %s); see statefun state receipt %s\n",
			describeEntry(a, state), env.Version, rc.Mutation)
	} else {
		fmt.Fprintf(c.stderr, "written: %s version %s → %s\n", describeEntry(a, state), env.Version, rc.Version)
	}
	return c.printReceipts(m, *rc)
}

// editFile returns the temporary file's text: a comment block, then the
// envelope as indented JSON.
func editFile(a stateclient.Address, state string, env *stateclient.Envelope) ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Editing %s: %s, version %s.\n", describeEntry(a, state), env.Typename, env.Version)
	buf.WriteString("# Change \"value\" (the value as JSON) or \"valueBase64\" (the exact stored bytes),\n")
	buf.WriteString("# or \"typename\". Save and quit to write it back; it is written only if the entry\n")
	fmt.Fprintf(&buf, "# still has version %s. An unchanged or empty file writes nothing.\n", env.Version)
	buf.WriteString("# Lines starting with '#' are ignored.\n")
	if err := writeJSON(&buf, env); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// change is an edit to write back.
type change struct {
	body             []byte // the envelope to PUT
	oldText, newText string // what the diff compares
}

// changeOf compares the edited file with the envelope fetched. It returns
// nil when the value and typename are unchanged (an empty file included),
// and an error when the file is not an envelope or changes what it cannot.
func changeOf(env *stateclient.Envelope, edited []byte) (*change, error) {
	var lines []string
	for _, l := range strings.SplitAfter(string(edited), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	text := strings.TrimSpace(strings.Join(lines, ""))
	if text == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("the edited file is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, errors.New("the edited file has more than one JSON value")
	}
	for k := range fields {
		if !slices.Contains([]string{"address", "state", "typename", "version", "expiresAt", "value", "valueBase64"}, k) {
			return nil, fmt.Errorf("the edited envelope has an unknown key %q (keys: typename, value, valueBase64)", k)
		}
	}
	origAddr, _ := json.Marshal(env.Address)
	origState, _ := json.Marshal(env.State)
	if v, ok := fields["address"]; ok && !jsonEqual(v, origAddr) {
		return nil, errors.New(`"address" was changed: edit writes back to the entry it fetched; to write elsewhere use put`)
	}
	if v, ok := fields["state"]; ok && !jsonEqual(v, origState) {
		return nil, errors.New(`"state" was changed: edit writes back to the entry it fetched; to write elsewhere use put`)
	}
	typename := env.Typename
	if v, ok := fields["typename"]; ok {
		if err := json.Unmarshal(v, &typename); err != nil || typename == "" {
			return nil, fmt.Errorf(`"typename" must be a non-empty string, got %s`, v)
		}
	}
	newValue, hasValue := fields["value"]
	if hasValue && string(newValue) == "null" && env.Value == nil {
		hasValue = false // an explicit null where there was no JSON form
	}
	var newB64 string
	rawB64, hasB64 := fields["valueBase64"]
	if hasB64 {
		if err := json.Unmarshal(rawB64, &newB64); err != nil {
			return nil, fmt.Errorf(`"valueBase64" must be a string, got %s`, rawB64)
		}
	}
	if !hasValue && !hasB64 {
		return nil, errors.New(`the edited envelope has neither "value" nor "valueBase64"`)
	}
	valueChanged := hasValue && (env.Value == nil || !jsonEqual(newValue, env.Value))
	b64Changed := hasB64 && newB64 != env.ValueBase64
	typeChanged := typename != env.Typename
	if !valueChanged && !b64Changed && !typeChanged {
		return nil, nil
	}
	out := map[string]any{"typename": typename}
	sendValue := valueChanged || !b64Changed && hasValue
	if sendValue {
		out["value"] = newValue
	}
	if b64Changed || !sendValue {
		// Both edited: the server checks that they agree.
		b64 := env.ValueBase64
		if hasB64 {
			b64 = newB64
		}
		out["valueBase64"] = b64
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf(`"value" is not valid JSON: %v`, err)
	}
	ch := &change{body: body, oldText: valueText(env.Typename, env.Value, env.ValueBase64, env.Value != nil)}
	if sendValue {
		ch.newText = valueText(typename, newValue, "", true)
	} else {
		ch.newText = valueText(typename, nil, out["valueBase64"].(string), false)
	}
	return ch, nil
}

// valueText is what the diff shows of a value: its typename, then the value
// as indented JSON, or its base64.
func valueText(typename string, value json.RawMessage, b64 string, useValue bool) string {
	s := "typename: " + typename + "\n"
	if !useValue {
		return s + "valueBase64: " + b64 + "\n"
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, value, "", "  "); err != nil {
		return s + string(value) + "\n"
	}
	return s + buf.String() + "\n"
}

// jsonEqual reports whether a and b are the same JSON value, up to white
// space, key order and string escapes; numbers compare as written.
func jsonEqual(a, b []byte) bool {
	return bytes.Equal(normalJSON(a), normalJSON(b))
}

func normalJSON(b []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(v)
	if err != nil {
		return b
	}
	return out
}

// runEditor runs the editor on path, attached to the terminal. EDITOR
// (else VISUAL, else vi) is split on white space ("code -w"); one that holds
// shell syntax (quotes, $, ...) runs through sh -c, as git does.
func (c *stateCLI) runEditor(path string) error {
	ed := strings.TrimSpace(os.Getenv("EDITOR"))
	if ed == "" {
		ed = strings.TrimSpace(os.Getenv("VISUAL"))
	}
	if ed == "" {
		ed = "vi"
	}
	var cmd *exec.Cmd
	if strings.ContainsAny(ed, "\"'\\$`|&;<>(){}*?[]~#") {
		cmd = exec.Command("sh", "-c", ed+` "$@"`, ed, path)
	} else {
		f := strings.Fields(ed)
		cmd = exec.Command(f[0], append(f[1:], path)...)
	}
	if in, ok := c.stdin.(*os.File); ok {
		cmd.Stdin = in
	}
	// The editor draws on stderr's terminal: stdout may be a pipe taking the
	// receipt.
	cmd.Stdout, cmd.Stderr = c.stderr, c.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %q: %v; nothing was written", ed, err)
	}
	return nil
}
