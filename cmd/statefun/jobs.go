package main

// `statefun jobs`: bulk repair and migration jobs over many entries, and
// orphaned state (docs/how-to/bulk-jobs.md).

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

const jobsLong = `Run bulk repair and migration jobs over many state entries through the state
access API of a running statefun (embedded mode): a job selects entries (a
function type, ids by prefix or range, a state name, a CEL predicate over the
decoded value) and sets each to the value of a CEL expression over the old one,
or deletes it. Every write goes through the address's mailbox with If-Match on
the version the job read, at a pace that yields to the functions' load (at
most --rate writes a second), audited with the job's id; a job survives a crash and reverts as a whole. For example:

    statefun jobs preview example/counter --state count --set 'value % 1000000'
    statefun jobs start example/counter --state count --set 'value % 1000000' --watch
    statefun jobs orphans
    statefun jobs purge-orphans --watch

Variables of an expression: value (the decoded value), id, state, typename,
version.`

// newJobsCmd builds `statefun jobs` and its commands.
func newJobsCmd(cl *cli) *cobra.Command {
	c := &stateCLI{cli: cl}
	cmd := &cobra.Command{
		Use:   "jobs <command> [flags] <args>",
		Short: "Bulk repair and migration jobs, and orphaned state (the state API)",
		Long:  jobsLong,
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
	cmd.AddCommand(c.jobsPreviewCmd(), c.jobsStartCmd(), c.jobsListCmd(), c.jobsStatusCmd(),
		c.jobsActionCmd("pause", "Pause a running job after its writes in flight"),
		c.jobsActionCmd("resume", "Resume a paused job from its cursor"),
		c.jobsActionCmd("cancel", "Stop a job for good (what it wrote stays; revert undoes it)"),
		c.jobsRevertCmd(), c.jobsWritesCmd(), c.jobsDeleteCmd(), c.jobsOrphansCmd(), c.jobsPurgeCmd())
	return cmd
}

// specFlags are the flags that define a job.
type specFlags struct {
	file                                 string
	idPrefix, idFrom, idTo, state, where string
	set, typename                        string
	del                                  bool
	rate                                 float64
	retries                              int
	reason                               string
}

func (f *specFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "file", "", "the job as JSON (the body of POST /jobs; - reads stdin) instead of these flags")
	fs.StringVar(&f.idPrefix, "id-prefix", "", "only ids starting with this")
	fs.StringVar(&f.idFrom, "id-from", "", "only ids from this one (inclusive, string order)")
	fs.StringVar(&f.idTo, "id-to", "", "only ids before this one (exclusive)")
	fs.StringVar(&f.state, "state", "", "only entries of this state name")
	fs.StringVar(&f.where, "where", "", "only entries for which this CEL predicate holds, e.g. 'value > 100'")
	fs.StringVar(&f.set, "set", "", "set each entry to this CEL expression's value, e.g. 'value + 1'")
	fs.BoolVar(&f.del, "delete", false, "delete each entry")
	fs.StringVar(&f.typename, "typename", "", "with --set: the new value's type (default: the entry's)")
	fs.Float64Var(&f.rate, "rate", 0, "a cap of writes per second (default: none, the job paces itself by the functions' load)")
	fs.IntVar(&f.retries, "retries", 0, "read and evaluate again an entry a function wrote meanwhile this many times (default 3; -1: never)")
	fs.StringVar(&f.reason, "reason", "", "why, recorded in the audit log with every write")
}

// spec builds the job from the flags and the type argument.
func (c *stateCLI) spec(f *specFlags, pos []string, orphans bool) (stateclient.JobSpec, error) {
	var s stateclient.JobSpec
	if f.file != "" {
		var b []byte
		var err error
		if f.file == "-" {
			b, err = io.ReadAll(c.stdin)
		} else {
			b, err = os.ReadFile(f.file)
		}
		if err != nil {
			return s, fmt.Errorf("--file: %w", err)
		}
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.DisallowUnknownFields()
		if err := d.Decode(&s); err != nil {
			return s, usagef("--file %s: not a job: %v", f.file, err)
		}
		if len(pos) > 0 {
			return s, usagef("give the job in --file or as arguments and flags, not both")
		}
		return s, nil
	}
	switch {
	case len(pos) > 1:
		return s, usagef("want one argument, <namespace>/<type>; got %d", len(pos))
	case len(pos) == 1:
		s.Select.Type = pos[0]
	case !orphans:
		return s, usagef("name the function type: <namespace>/<type>")
	}
	s.Select.IDPrefix, s.Select.IDFrom, s.Select.IDTo = f.idPrefix, f.idFrom, f.idTo
	s.Select.State, s.Select.Where, s.Select.Orphans = f.state, f.where, orphans
	switch {
	case f.set != "" && f.del:
		return s, usagef("give --set or --delete, not both")
	case f.set != "":
		s.Action = stateclient.JobAction{Op: "set", Expr: f.set, Typename: f.typename}
	case f.del || orphans:
		s.Action = stateclient.JobAction{Op: "delete"}
	default:
		return s, usagef("say what becomes of each entry: --set EXPR or --delete")
	}
	s.Rate, s.Retries, s.Reason = f.rate, f.retries, f.reason
	return s, nil
}

func (c *stateCLI) jobsPreviewCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "preview [flags] <namespace>/<type>",
		Short: "What a job would do: counts and a sample of diffs, nothing written",
	}
	var (
		f      specFlags
		sample int
		output string
	)
	fs := cmd.Flags()
	f.register(fs)
	fs.IntVar(&sample, "sample", 10, "show this many diffs (at most 100)")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		spec, err := c.spec(&f, pos, false)
		if err != nil {
			return err
		}
		return c.preview(spec, sample, output)
	})
}

func (c *stateCLI) preview(spec stateclient.JobSpec, sample int, output string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	p, err := cl.PreviewJob(c.ctx(), spec, sample)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(c.stdout, p)
	}
	fmt.Fprintf(c.stdout, "scanned %d, matched %d, would change %d, unchanged %d, failed %d%s\n",
		p.Counts.Scanned, p.Counts.Matched, p.Counts.Changed, p.Counts.Unchanged, p.Counts.Failed,
		map[bool]string{true: " (stopped after 1,000,000 entries)"}[p.Truncated])
	if len(p.Sample) > 0 {
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "TYPE\tID\tSTATE\tBEFORE\tAFTER")
		for _, d := range p.Sample {
			after := "(deleted)"
			if d.After != nil {
				after = jobImage(*d.After)
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", d.Namespace, d.Type, d.ID, d.State, jobImage(d.Before), after)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return c.writeProblems("FAILED", p.Failures)
}

// jobImage is a value on one line: its JSON, else base64.
func jobImage(im stateclient.JobImage) string {
	if len(im.Value) > 0 {
		return oneLine(string(im.Value))
	}
	return "base64:" + im.ValueBase64
}

func (c *stateCLI) writeProblems(title string, ps []stateclient.JobProblem) error {
	if len(ps) == 0 {
		return nil
	}
	fmt.Fprintf(c.stdout, "%s:\n", strings.ToLower(title))
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "TYPE\tID\tSTATE\tVERSION\tDETAIL")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\t%s\n", p.Namespace, p.Type, p.ID, p.State, p.Version, oneLine(p.Detail))
	}
	return tw.Flush()
}

func (c *stateCLI) jobsStartCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "start [flags] <namespace>/<type>",
		Short: "Create and start a job",
		Long: `Creates a job and starts it; prints its id (with --watch, its progress until it
ends). Run "statefun jobs preview" with the same flags first.`,
	}
	var (
		f      specFlags
		watch  bool
		output string
	)
	fs := cmd.Flags()
	f.register(fs)
	fs.BoolVar(&watch, "watch", false, "show the progress until the job ends")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		spec, err := c.spec(&f, pos, false)
		if err != nil {
			return err
		}
		return c.startJob(spec, watch, output)
	})
}

func (c *stateCLI) startJob(spec stateclient.JobSpec, watch bool, output string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	j, err := cl.CreateJob(c.ctx(), spec)
	if err != nil {
		return err
	}
	return c.showJob(cl, j, watch, output)
}

// showJob prints a job, or with watch its progress until it ends.
func (c *stateCLI) showJob(cl *stateclient.Client, j *stateclient.Job, watch bool, output string) error {
	if watch {
		var err error
		if j, err = c.watch(cl, j); err != nil {
			return err
		}
	}
	if output == "json" {
		return writeJSON(c.stdout, j)
	}
	if err := c.writeJob(j); err != nil {
		return err
	}
	if watch && j.Status == "failed" {
		return fmt.Errorf("job %s failed: %s", j.ID, j.Error)
	}
	return nil
}

// watch polls a job until it ends; on a terminal it redraws a progress
// bar on one line.
func (c *stateCLI) watch(cl *stateclient.Client, j *stateclient.Job) (*stateclient.Job, error) {
	tty := c.terminal(c.stdout)
	for {
		if tty {
			fmt.Fprintf(c.stdout, "\r%s\x1b[K", progressLine(j))
		}
		if j.Ended() || j.Status == "paused" {
			if tty {
				fmt.Fprintln(c.stdout)
			}
			return j, nil
		}
		time.Sleep(500 * time.Millisecond)
		var err error
		if j, err = cl.Job(c.ctx(), j.ID); err != nil {
			return nil, err
		}
	}
}

// progressLine is a job's progress as a bar and its counters.
func progressLine(j *stateclient.Job) string {
	const width = 30
	frac := 1.0
	if j.Total > 0 {
		frac = min(float64(j.Counts.Scanned)/float64(j.Total), 1)
	}
	if !j.Ended() && frac == 1 {
		frac = 0.99
	}
	n := int(frac * width)
	pace := ""
	if j.Pace != nil {
		pace = fmt.Sprintf("  pace %.0f/s", j.Pace.Rate)
	}
	return fmt.Sprintf("%s [%s%s] %3.0f%% %d/%d  changed %d  conflicts %d  failed %d%s  %s", j.ID,
		strings.Repeat("#", n), strings.Repeat("-", width-n), frac*100, j.Counts.Scanned, j.Total,
		j.Counts.Changed, j.Counts.Conflicts, j.Counts.Failed, pace, j.Status)
}

func (c *stateCLI) writeJob(j *stateclient.Job) error {
	what := ""
	if j.Kind == "revert" {
		what = "revert of job " + j.Reverts
	} else if j.Spec != nil {
		what = describeSpec(*j.Spec)
	}
	fields := [][2]string{
		{"job", j.ID}, {"kind", j.Kind}, {"what", what}, {"status", j.Status}, {"progress", progressLine(j)},
		{"principal", j.Principal}, {"created", formatTime(j.CreatedAt)}, {"ended", formatTimePtr(j.EndedAt)},
		{"counts", fmt.Sprintf("scanned %d, matched %d, changed %d, unchanged %d, skipped %d, retried %d, conflicts %d, failed %d",
			j.Counts.Scanned, j.Counts.Matched, j.Counts.Changed, j.Counts.Unchanged, j.Counts.Skipped, j.Counts.Retried, j.Counts.Conflicts, j.Counts.Failed)},
	}
	if j.Error != "" {
		fields = append(fields, [2]string{"error", j.Error})
	}
	if err := writeFields(c.stdout, fields); err != nil {
		return err
	}
	if err := c.writeProblems("CONFLICTS (left as they are)", j.Conflicts); err != nil {
		return err
	}
	return c.writeProblems("FAILURES", j.Failures)
}

// describeSpec says what a job does on one line.
func describeSpec(s stateclient.JobSpec) string {
	var parts []string
	if s.Select.Orphans {
		parts = append(parts, "orphans")
	}
	if s.Select.Type != "" {
		parts = append(parts, s.Select.Type)
	}
	for _, p := range [][2]string{{"id-prefix", s.Select.IDPrefix}, {"id-from", s.Select.IDFrom}, {"id-to", s.Select.IDTo},
		{"state", s.Select.State}, {"where", s.Select.Where}} {
		if p[1] != "" {
			parts = append(parts, fmt.Sprintf("%s %q", p[0], p[1]))
		}
	}
	if s.Action.Op == "set" {
		parts = append(parts, fmt.Sprintf("set %q", s.Action.Expr))
	} else {
		parts = append(parts, "delete")
	}
	return strings.Join(parts, ", ")
}

func (c *stateCLI) jobsListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list [-o table|json]", Short: "Every job, newest first, with its progress"}
	var output string
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		if len(pos) > 0 {
			return usagef("list takes no arguments")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		jobs, err := cl.Jobs(c.ctx())
		if err != nil {
			return err
		}
		if output == "json" {
			return writeJSON(c.stdout, jobs)
		}
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "JOB\tKIND\tSTATUS\tPROGRESS\tCHANGED\tCONFLICTS\tFAILED\tCREATED\tWHAT")
		for _, j := range jobs {
			what := "revert of " + j.Reverts
			if j.Spec != nil {
				what = describeSpec(*j.Spec)
			}
			pct := 100.0
			if j.Total > 0 {
				pct = min(100*float64(j.Counts.Scanned)/float64(j.Total), 100)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f%%\t%d\t%d\t%d\t%s\t%s\n", j.ID, j.Kind, j.Status, pct, j.Counts.Changed,
				j.Counts.Conflicts, j.Counts.Failed, formatTime(j.CreatedAt), oneLine(what))
		}
		return tw.Flush()
	})
}

// oneID checks a command's single job id argument.
func oneID(pos []string) (string, error) {
	if len(pos) != 1 || pos[0] == "" {
		return "", usagef("want one argument, the job's id (statefun jobs list shows them)")
	}
	return pos[0], nil
}

func (c *stateCLI) jobsStatusCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "status [--watch] [-o table|json] <job>", Short: "One job: its progress, conflicts and failures"}
	var (
		watch  bool
		output string
	)
	cmd.Flags().BoolVar(&watch, "watch", false, "show the progress until the job ends or pauses")
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		id, err := oneID(pos)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		j, err := cl.Job(c.ctx(), id)
		if err != nil {
			return err
		}
		return c.showJob(cl, j, watch, output)
	})
}

func (c *stateCLI) jobsActionCmd(action, short string) *cobra.Command {
	cmd := &cobra.Command{Use: action + " [-o table|json] <job>", Short: short}
	var output string
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		id, err := oneID(pos)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		do := map[string]func() (*stateclient.Job, error){
			"pause":  func() (*stateclient.Job, error) { return cl.PauseJob(c.ctx(), id) },
			"resume": func() (*stateclient.Job, error) { return cl.ResumeJob(c.ctx(), id) },
			"cancel": func() (*stateclient.Job, error) { return cl.CancelJob(c.ctx(), id) },
		}[action]
		j, err := do()
		if err != nil {
			return err
		}
		return c.showJob(cl, j, false, output)
	})
}

func (c *stateCLI) jobsRevertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revert [--reason R] [--watch] <job>",
		Short: "Undo every write of an ended job (entries changed since are listed, not overwritten)",
	}
	var (
		reason, output string
		watch          bool
	)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit log")
	cmd.Flags().BoolVar(&watch, "watch", false, "show the progress until the revert ends")
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		id, err := oneID(pos)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		j, err := cl.RevertJob(c.ctx(), id, reason)
		if err != nil {
			return err
		}
		return c.showJob(cl, j, watch, output)
	})
}

func (c *stateCLI) jobsWritesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "writes [--limit N] [-o table|json] <job>", Short: "A job's writes, from the audit log"}
	var (
		limit  int
		output string
	)
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many writes (-1: all)")
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		id, err := oneID(pos)
		if err != nil {
			return err
		}
		if limit == 0 || limit < -1 {
			return usagef("--limit %d: want a positive count, or -1 for all", limit)
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		recs := []stateclient.AuditRecord{}
		after := ""
		for limit < 0 || len(recs) < limit {
			page := 1000
			if limit > 0 {
				page = min(page, limit-len(recs))
			}
			p, err := cl.JobWrites(c.ctx(), id, after, page)
			if err != nil {
				return err
			}
			recs = append(recs, p.Records...)
			if p.Next == "" {
				break
			}
			after = p.Next
		}
		if output == "json" {
			return writeJSON(c.stdout, recs)
		}
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "AT\tMUTATION\tOP\tTYPE\tID\tSTATE\tVERSION")
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%s\t%s\n", formatTime(r.At), r.Mutation, r.Op, r.Namespace, r.Type, r.ID, r.State, orDash(r.Version))
		}
		return tw.Flush()
	})
}

func (c *stateCLI) jobsDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "delete <job>", Short: "Forget an ended job (its writes stay in the audit log)"}
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		id, err := oneID(pos)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		return cl.DeleteJob(c.ctx(), id)
	})
}

func (c *stateCLI) jobsOrphansCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "orphans [-o table|json]",
		Short: "State no deployed function type or registered state name owns, with sizes",
	}
	var output string
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		if len(pos) > 0 {
			return usagef("orphans takes no arguments")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		o, err := cl.Orphans(c.ctx())
		if err != nil {
			return err
		}
		if output == "json" {
			return writeJSON(c.stdout, o)
		}
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "TYPE\tSTATE\tWHY\tIDS\tENTRIES\tBYTES")
		for _, x := range o.Orphans {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\t%d\t%d\n", x.Namespace, x.Type, orDash(x.State), x.Reason, x.IDs, x.Entries, x.Bytes)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if !o.Complete {
			fmt.Fprintln(c.stdout, "(the scan stopped after 1,000,000 entries: the counts are lower bounds)")
		}
		return nil
	})
}

func (c *stateCLI) jobsPurgeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "purge-orphans [--preview] [--watch] [--rate N] [--reason R] [<namespace>/<type>]",
		Short: "Delete the orphaned state (of one type, or all) as a job, revertible",
	}
	var (
		f              specFlags
		preview, watch bool
		output         string
		sample         int
	)
	fs := cmd.Flags()
	fs.BoolVar(&preview, "preview", false, "only count what would be deleted")
	fs.IntVar(&sample, "sample", 10, "with --preview: show this many entries")
	fs.BoolVar(&watch, "watch", false, "show the progress until the job ends")
	fs.Float64Var(&f.rate, "rate", 0, "a cap of deletions per second (default: none, the job paces itself by the functions' load)")
	fs.StringVar(&f.reason, "reason", "", "why, recorded in the audit log")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		spec, err := c.spec(&f, pos, true)
		if err != nil {
			return err
		}
		if preview {
			return c.preview(spec, sample, output)
		}
		return c.startJob(spec, watch, output)
	})
}
