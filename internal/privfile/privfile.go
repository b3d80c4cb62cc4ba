// Package privfile opens the files that decide whom the runtime trusts —
// the state API's token file, the cluster secret — refusing one that
// others may change.
package privfile

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
)

// WritableError is Open's error for a file that its group or others may
// write: whoever may write it can grant themselves access.
type WritableError struct {
	Path string
	Mode fs.FileMode // the file's permission bits
}

func (e *WritableError) Error() string {
	return fmt.Sprintf("privfile: %s is writable by its group or by others (mode %04o); run chmod 600 %s (or chmod 640 for a group that only reads it)", e.Path, e.Mode, e.Path)
}

// Open opens path for reading. On systems with Unix permissions it refuses
// a file that its group or others may write, with a *WritableError. The
// mode checked is that of the file opened, not of the path, which could
// name another file by the time it is read.
func Open(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o022 != 0 {
		f.Close()
		return nil, &WritableError{Path: path, Mode: perm}
	}
	return f, nil
}
