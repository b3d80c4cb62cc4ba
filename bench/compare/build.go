//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// build is one build of the runtime under comparison.
type build struct {
	label string   // BASE or HEAD
	rev   string   // a git revision; "" is the working tree
	flags []string // more go build flags
	env   []string // more environment of its runs, KEY=VALUE

	// Set by prepare.
	commit string // the abbreviated commit (HEAD's, for the working tree)
	desc   string // "<commit> <subject>", and whether the working tree had changes
	bin    string // the statefun binary
}

// tree is the repository's work tree: where the working tree's build, the
// benchmarks and git run.
type tree struct {
	root string
}

// openTree finds the work tree around dir ("": the working directory).
func openTree(ctx context.Context, dir string) (*tree, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("compare: git is needed to check out BASE: %w", err)
	}
	out, err := gitOutput(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("compare: run it inside the repository's work tree: %w", err)
	}
	t := &tree{root: out}
	if _, err := os.Stat(filepath.Join(t.root, "cmd", "statefun")); err != nil {
		return nil, fmt.Errorf("compare: %s has no cmd/statefun: run it inside the statefun repository", t.root)
	}
	return t, nil
}

func (t *tree) benchDir() string { return filepath.Join(t.root, "bench") }

// prepare builds each build's statefun binary and this tree's bench.test
// into work, and returns bench.test's path.
func (t *tree) prepare(ctx context.Context, builds []*build, work string, log io.Writer) (string, error) {
	for i, b := range builds {
		b.bin = filepath.Join(work, fmt.Sprintf("statefun-%d-%s", i, strings.ToLower(b.label)))
		if err := t.describe(ctx, b); err != nil {
			return "", err
		}
		fmt.Fprintf(log, "compare: building %s: %s%s\n", b.label, b.desc, flagsNote(b.flags))
		if err := t.buildRuntime(ctx, b, work); err != nil {
			return "", err
		}
	}
	testBin := filepath.Join(work, "bench.test")
	fmt.Fprintln(log, "compare: building bench.test from the working tree (load generator, function, kfake)")
	if err := goCmd(ctx, t.root, "test", "-c", "-o", testBin, "./bench"); err != nil {
		return "", fmt.Errorf("compare: building bench.test: %w", err)
	}
	return testBin, nil
}

// flagsNote names the build flags that change the code built (-trimpath
// changes only the file names recorded in it).
func flagsNote(flags []string) string {
	var shown []string
	for _, f := range flags {
		if f != "-trimpath" {
			shown = append(shown, f)
		}
	}
	if len(shown) == 0 {
		return ""
	}
	return ", built with " + strings.Join(shown, " ")
}

// envNote says what a build's runs had in their environment, if anything.
func envNote(env []string) string {
	if len(env) == 0 {
		return ""
	}
	return ", run with " + strings.Join(env, " ")
}

// describe resolves b's revision and says what it is.
func (t *tree) describe(ctx context.Context, b *build) error {
	rev := b.rev
	if rev == "" {
		rev = "HEAD"
	}
	out, err := gitOutput(ctx, t.root, "log", "-1", "--format=%h%x00%s", rev+"^{commit}", "--")
	if err != nil {
		return fmt.Errorf("compare: %s=%q is not a commit of this repository: %w", b.label, b.rev, err)
	}
	commit, subject, _ := strings.Cut(out, "\x00")
	b.commit, b.desc = commit, commit+" "+subject
	if b.rev == "" {
		st, err := gitOutput(ctx, t.root, "status", "--porcelain", "--untracked-files=no")
		if err != nil {
			return err
		}
		b.desc = "the working tree at " + b.desc
		if st != "" {
			b.desc += ", with uncommitted changes"
		}
	}
	return nil
}

// buildRuntime builds cmd/statefun of b into b.bin with this machine's Go
// toolchain: from the working tree, or from a temporary detached worktree of
// b.rev, removed afterwards.
func (t *tree) buildRuntime(ctx context.Context, b *build, work string) (err error) {
	src := t.root
	if b.rev != "" {
		src = filepath.Join(work, "src-"+strings.ToLower(b.label))
		remove, err := t.checkout(ctx, b.commit, src)
		if err != nil {
			return fmt.Errorf("compare: checking out %s: %w", b.label, err)
		}
		defer func() {
			if rerr := remove(); rerr != nil && err == nil {
				err = fmt.Errorf("compare: removing the worktree of %s: %w", b.label, rerr)
			}
		}()
	}
	args := append([]string{"build"}, b.flags...)
	args = append(args, "-o", b.bin, "./cmd/statefun")
	if err := goCmd(ctx, src, args...); err != nil {
		return fmt.Errorf("compare: building %s (%s): %w", b.label, b.desc, err)
	}
	return nil
}

// checkout adds a detached worktree of commit at dir; remove removes it
// again (git worktree prune cleans up one left behind).
func (t *tree) checkout(ctx context.Context, commit, dir string) (remove func() error, err error) {
	if _, err := gitOutput(ctx, t.root, "worktree", "add", "--detach", dir, commit); err != nil {
		return nil, err
	}
	return func() error {
		// Not ctx: the worktree goes even when the comparison was
		// interrupted.
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := gitOutput(rctx, t.root, "worktree", "remove", "--force", dir)
		return err
	}, nil
}

// goCmd runs the go command in dir. GOTOOLCHAIN=local builds an old
// revision with this machine's toolchain, as the comparison promises;
// GOWORK=off keeps a workspace file out of it.
func goCmd(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, tail(out.String(), 30))
	}
	return nil
}

// gitOutput runs git in dir ("": the working directory) and returns its
// standard output, trimmed.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
