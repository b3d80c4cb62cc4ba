package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// linkedDocs are the Markdown files whose links are checked, as globs
// relative to the repository.
var linkedDocs = []string{"README.md", "docs/*.md", "docs/*/*.md", "examples/*/README.md"}

var (
	// mdLinkRe is an inline link or image: [text](target) or
	// [text](target "title").
	mdLinkRe = regexp.MustCompile(`\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// docRefRe is a mention of a manual page by its path in the
	// repository, as the docs write them in prose: docs/state-api.md.
	docRefRe   = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(docs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)\b`)
	codeSpanRe = regexp.MustCompile("`[^`]*`")
	schemeRe   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	headingRe  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// TestDocLinks checks that every relative link of the docs, and every
// docs/<page>.md they mention, names a file that exists, and that a
// link's #anchor names a heading of its target.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, g := range linkedDocs {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		for _, p := range docLinkProblems(root, f, anchors) {
			t.Errorf("%s:%s", rel, p)
		}
		checked++
	}
	t.Logf("checked the links of %d files", checked)
}

// docLinkProblems returns "line: problem" for every broken link of file.
func docLinkProblems(root, file string, anchors map[string]map[string]bool) []string {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{"0: " + err.Error()}
	}
	var problems []string
	fence := ""
	for i, line := range strings.Split(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		if m := fenceRe.FindString(trimmed); m != "" {
			switch {
			case fence == "":
				fence = m
			case strings.HasPrefix(trimmed, fence):
				fence = ""
			}
			continue
		}
		if fence != "" || strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			continue // code: commands, output, not links
		}
		report := func(format string, a ...any) {
			problems = append(problems, fmt.Sprintf("%d: %s", i+1, fmt.Sprintf(format, a...)))
		}
		for _, m := range mdLinkRe.FindAllStringSubmatch(codeSpanRe.ReplaceAllString(line, "``"), -1) {
			target := m[1]
			if schemeRe.MatchString(target) {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(resolved); err != nil {
					report("link %s: no file %s", target, mustRel(root, resolved))
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") {
				if !headingAnchors(resolved, anchors)[anchor] {
					report("link %s: %s has no heading with the anchor #%s", target, mustRel(root, resolved), anchor)
				}
			}
		}
		for _, m := range docRefRe.FindAllStringSubmatch(line, -1) {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
				report("%s: no such page", m[1])
			}
		}
	}
	return problems
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces as hyphens, a
// repeated one with -1, -2...
func headingAnchors(file string, cache map[string]map[string]bool) map[string]bool {
	if a, ok := cache[file]; ok {
		return a
	}
	a := map[string]bool{}
	cache[file] = a
	text, err := os.ReadFile(file)
	if err != nil {
		return a
	}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(text), "\n") {
		if m := fenceRe.FindString(strings.TrimSpace(line)); m != "" {
			if fence == "" {
				fence = m
			} else if strings.HasPrefix(strings.TrimSpace(line), fence) {
				fence = ""
			}
			continue
		}
		m := headingRe.FindStringSubmatch(line)
		if fence != "" || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			a[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	return a
}

func mustRel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}
