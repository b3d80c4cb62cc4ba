package privfile

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// A file its group or others may write is refused with its mode; one
// only its owner (and a group that reads) may write opens.
func TestOpen(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o640: true, 0o400: true, 0o644: true, 0o620: false, 0o602: false, 0o666: false} {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Chmod, because WriteFile's mode is filtered by the umask.
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		var we *WritableError
		switch {
		case ok && err != nil:
			t.Errorf("mode %04o: %v", mode, err)
		case !ok && (!errors.As(err, &we) || we.Mode != mode || we.Path != path):
			t.Errorf("mode %04o: err = %v, want a WritableError", mode, err)
		}
		if f != nil {
			f.Close()
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file: %v", err)
	}
}
