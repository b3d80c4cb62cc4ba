package stateapi

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
		{"duplicate secret", "# ops\nalice shared-secret-0123456 read\n\nbob shared-secret-0123456 read,write\n",
			":4: token bob has the same secret as the token on line 2; give every token its own secret"},
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

// TestLoadTokensRefusesWritableFile: a token file that group or others may
// write is refused with its mode and the fix; 600 and 640 load.
func TestLoadTokensRefusesWritableFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o640: true, 0o400: true, 0o644: true, 0o620: false, 0o602: false, 0o666: false, 0o660: false} {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte("alice alice-secret-0123456 read\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Chmod, because WriteFile's mode is filtered by the umask.
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTokens(path)
		if ok {
			if err != nil {
				t.Errorf("mode %04o: %v", mode, err)
			}
			continue
		}
		want := fmt.Sprintf("stateapi: token file %s is writable by its group or by others (mode %04o), so they could grant themselves access; run chmod 600 %s (or chmod 640", path, mode, path)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("mode %04o: err = %v\nwant %s...", mode, err, want)
		}
	}
}
