package main

import (
	"fmt"
	"strings"
)

// unifiedDiff returns a unified diff of the lines of a and b with three
// lines of context, labelled oldName and newName; "" when they are equal.
// It finds a longest common subsequence of lines, which is quadratic: above
// maxDiffCells line pairs it shows every line removed and added instead.
func unifiedDiff(oldName, newName, a, b string) string {
	if a == b {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	ops := diffLines(x, y)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", oldName, newName)
	const context = 3
	for i := 0; i < len(ops); {
		// Find the next change.
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(i-context, 0)
		// Extend the hunk while changes are within 2*context of each other.
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
			} else if j-end >= 2*context {
				break
			}
		}
		end = min(end+context, len(ops))
		hunk := ops[start:end]
		oldStart, newStart := ops[start].oldLine, ops[start].newLine
		var oldN, newN int
		for _, o := range hunk {
			if o.kind != '+' {
				oldN++
			}
			if o.kind != '-' {
				newN++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(oldStart, oldN), hunkRange(newStart, newN))
		for _, o := range hunk {
			sb.WriteByte(o.kind)
			sb.WriteString(o.text)
			sb.WriteByte('\n')
		}
		i = end
	}
	return sb.String()
}

// hunkRange formats a hunk's "start,count" (1-based; start is the line
// before an empty range, as diff -u does).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

type diffOp struct {
	kind             byte // ' ', '-' or '+'
	text             string
	oldLine, newLine int // 0-based lines of a and b before this op
}

const maxDiffCells = 4 << 20

// diffLines returns the edit script from x to y.
func diffLines(x, y []string) []diffOp {
	var ops []diffOp
	add := func(kind byte, text string, i, j int) { ops = append(ops, diffOp{kind, text, i, j}) }
	if len(x)*len(y) > maxDiffCells {
		for i, s := range x {
			add('-', s, i, 0)
		}
		for j, s := range y {
			add('+', s, len(x), j)
		}
		return ops
	}
	// lcs[i][j] is the length of a longest common subsequence of x[i:], y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			add(' ', x[i], i, j)
			i, j = i+1, j+1
		case j == len(y) || i < len(x) && lcs[i+1][j] >= lcs[i][j+1]:
			add('-', x[i], i, j)
			i++
		default:
			add('+', y[j], i, j)
			j++
		}
	}
	return ops
}
