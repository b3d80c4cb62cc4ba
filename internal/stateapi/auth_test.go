package stateapi

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadTokens(t *testing.T) {
	for _, c := range []struct {
		name, file, err string
	}{
		{"good", "# operators\n\nalice alice-secret-0123456 read,write\nbob bob-secret-012345678 read\n", ""},
		{"fields", "alice alice-secret-0123456\n", "want \"<name> <secret> <scopes>\""},
		{"scope", "alice alice-secret-0123456 admin\n", `unknown scope "admin"`},
		{"short secret", "alice short read\n", "shorter than 16"},
		{"name not UTF-8", "al\xffce alice-secret-0123456 read\n", "not valid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadTokens(path)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.HasPrefix(err.Error(), "stateapi: ") {
					t.Fatalf("err %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil || len(got) != 2 || got[0].Name != "alice" || !slices.Equal(got[0].Scopes, []string{ScopeRead, ScopeWrite}) {
				t.Fatalf("%+v, %v", got, err)
			}
		})
	}
}
