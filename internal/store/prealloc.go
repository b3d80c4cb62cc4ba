package store

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walChunk is how far ahead of the writes a write-ahead log file is
// preallocated on smallWALPrealloc.
const walChunk = 1 << 20

// smallWALPrealloc is a filesystem on which Pebble's write-ahead log files
// are preallocated 1 MiB at a time as they are written, instead of 110% of
// the memtable size at once. Pebble makes that reservation for every log
// file it creates, and a fresh store rotates to a new log file each time
// its memtable (starting at 256 KiB and doubling) fills, so a store holding
// a few hundred KiB took two or three full reservations — 36 MB each with
// Pebble's 32 MiB memtable. Preallocating at all matters: a synced write
// that has to allocate blocks costs about twice as much on ext4
// (BenchmarkCommit100States), so the small chunks keep most of the gain.
// Pebble still recycles log files, so a busy store reuses files already at
// full size.
type smallWALPrealloc struct{ vfs.FS }

func (fs smallWALPrealloc) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &chunkPreallocFile{File: f}, nil
}

func (fs smallWALPrealloc) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || !strings.HasSuffix(newname, ".log") {
		return f, err
	}
	// A recycled file keeps its blocks; allocate past them as it grows.
	st, serr := f.Stat()
	if serr != nil {
		return &chunkPreallocFile{File: f}, nil
	}
	return &chunkPreallocFile{File: f, allocated: st.Size()}, nil
}

// Unwrap returns the wrapped filesystem.
func (fs smallWALPrealloc) Unwrap() vfs.FS { return fs.FS }

// chunkPreallocFile preallocates walChunk bytes ahead of its sequential
// writes and ignores Pebble's own, memtable-sized, Preallocate calls.
// Pebble's log writer writes from one goroutine at a time, in order.
type chunkPreallocFile struct {
	vfs.File
	offset    int64 // where the next Write goes
	allocated int64 // bytes preallocated from the start of the file
}

func (f *chunkPreallocFile) Write(p []byte) (int, error) {
	if end := f.offset + int64(len(p)); end > f.allocated {
		next := (end + walChunk - 1) / walChunk * walChunk
		// Best effort, as Pebble's own preallocation: a filesystem
		// without it still takes the write.
		_ = f.File.Preallocate(f.allocated, next-f.allocated)
		f.allocated = next
	}
	n, err := f.File.Write(p)
	f.offset += int64(n)
	return n, err
}

// Preallocate ignores Pebble's reservation; Write makes its own.
func (f *chunkPreallocFile) Preallocate(offset, length int64) error { return nil }
