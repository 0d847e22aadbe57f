package api

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/posgate/posgate/internal/disk"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/ledger"
)

// backupPattern names the ledger's copy while it is made and sent, in the ledger's directory
// (the same file system: no room is taken elsewhere, and a copy left by a crash is found).
const backupPattern = ".backup-*.db"

// DefaultBackupStall is how long a backup's download may make no progress before it is
// dropped (Server.BackupStall): a client that stops reading but keeps its connection (a
// paused browser download, a pipe into a program that hangs) would otherwise hold the
// store's one backup, and the copy of the ledger beside it, for as long as it stays.
const DefaultBackupStall = time.Minute

// backup answers GET /v1/backup with what a store-server's data directory needs to start
// again as the store was: a tar of the ledger, copied as of one commit while the store goes
// on trading and checked before it is sent, and the catalog's files. One backup runs at a
// time (409 backup_running); it needs room for a copy of the ledger beside it (503
// backup_no_room).
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if !s.backupMu.TryLock() {
		writeError(w, perr.New(perr.Refused, "backup_running", "a backup of the store is being made; try again when it is done"))
		return
	}
	defer s.backupMu.Unlock()
	dir := s.Ledger.Dir()
	// Copies a crash left behind: none is being made (the lock above, and one store-server
	// per data directory).
	if stale, err := filepath.Glob(filepath.Join(dir, backupPattern)); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	need := s.Ledger.FileBytes()
	if sp, err := disk.Of(dir); err == nil && sp.Free < need+s.DiskWarnBytes {
		writeError(w, perr.New(perr.Unavailable, "backup_no_room",
			"a backup needs room for a copy of the ledger (%d bytes) beside it, above the disk warning's %d bytes; %d are free",
			need, s.DiskWarnBytes, sp.Free))
		return
	}
	tmp, err := os.CreateTemp(dir, backupPattern)
	if err != nil {
		s.backupFailed(w, err)
		return
	}
	path := tmp.Name()
	tmp.Close()
	os.Remove(path) // the snapshot makes the file itself
	defer os.Remove(path)
	start := s.Now()
	if err := s.Ledger.Backup(r.Context(), path); err != nil {
		s.backupFailed(w, err)
		return
	}
	files, err := s.backupFiles()
	if err != nil {
		s.backupFailed(w, err)
		return
	}
	// The archives, opened after the ledger's copy was made: every day the copy lists as
	// archived is in the file opened (an archive is replaced whole, by a rename, before the
	// ledger lets its days go), and one replaced while it is sent is sent as opened.
	archives, err := openArchives(s.Ledger)
	if err != nil {
		s.backupFailed(w, err)
		return
	}
	defer func() {
		for _, a := range archives {
			a.f.Close()
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		s.backupFailed(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.backupFailed(w, err)
		return
	}
	// The tar's length, sent ahead so that a backup cut short shows as one: a 512-byte
	// header and the body in 512-byte blocks for each file, and two empty blocks at the end.
	size := tarSize(fi.Size())
	for _, c := range files {
		size += tarSize(int64(len(c.Body)))
	}
	for _, a := range archives {
		size += tarSize(a.size)
	}
	size += 2 * 512
	name := fmt.Sprintf("posgate-%s-%s.tar", s.Store, start.UTC().Format("20060102T150405Z"))
	h := w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	stall := s.BackupStall
	if stall <= 0 {
		stall = DefaultBackupStall
	}
	pw := &progressWriter{w: w, rc: http.NewResponseController(w), stall: stall}
	// The connection may serve the client's next request: no deadline is left on it.
	defer pw.rc.SetWriteDeadline(time.Time{})
	err = writeBackup(tar.NewWriter(pw), f, fi.Size(), archives, files, start)
	if err == nil {
		err = pw.flush() // the end of the tar, still within the deadline
	}
	if err != nil {
		s.Logger.Warn("backup: not sent whole", "file", name, "err", err)
		return
	}
	s.Logger.Info("backup of the store sent", "file", name, "bytes", size, "took", s.Now().Sub(start).Round(time.Millisecond))
}

// writeBackup writes the tar of a backup: the ledger's copy (f, of size bytes), the
// archives and the files, and its end.
func writeBackup(tw *tar.Writer, f io.Reader, size int64, archives []archiveFile, files []catalog.File, at time.Time) error {
	err := tw.WriteHeader(&tar.Header{Name: ledger.FileName, Mode: 0o600, Size: size, ModTime: at, Format: tar.FormatUSTAR})
	if err == nil {
		_, err = io.Copy(tw, f)
	}
	for _, a := range archives {
		if err != nil {
			return err
		}
		err = tw.WriteHeader(&tar.Header{Name: a.name, Mode: 0o600, Size: a.size, ModTime: at, Format: tar.FormatUSTAR})
		if err == nil {
			_, err = io.Copy(tw, io.LimitReader(a.f, a.size))
		}
	}
	for _, c := range files {
		if err != nil {
			return err
		}
		err = tw.WriteHeader(&tar.Header{Name: c.Name, Mode: 0o600, Size: int64(len(c.Body)), ModTime: at, Format: tar.FormatUSTAR})
		if err == nil {
			_, err = tw.Write(c.Body)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	return err
}

// progressWriter writes a download, each write to be taken by the client within stall: a
// write deadline on the connection, moved on as the download goes.
type progressWriter struct {
	w     io.Writer
	rc    *http.ResponseController
	stall time.Duration
}

func (p *progressWriter) Write(b []byte) (int, error) {
	if err := p.arm(); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

func (p *progressWriter) flush() error {
	if err := p.arm(); err != nil {
		return err
	}
	if err := p.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// arm moves the deadline on; a writer that cannot take one (not a connection's) writes
// without.
func (p *progressWriter) arm() error {
	if err := p.rc.SetWriteDeadline(time.Now().Add(p.stall)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// archiveFile is an archive of the ledger's, opened for a backup.
type archiveFile struct {
	name string // its name in the tar: archive/ledger-YYYY-MM.db
	f    *os.File
	size int64
}

// openArchives opens the ledger's archives (ledger.ArchiveFiles) for a backup.
func openArchives(l *ledger.Ledger) ([]archiveFile, error) {
	paths, err := l.ArchiveFiles()
	if err != nil {
		return nil, err
	}
	var out []archiveFile
	for _, p := range paths {
		f, err := os.Open(p)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil {
				out = append(out, archiveFile{name: ledger.ArchiveDir + "/" + filepath.Base(p), f: f, size: fi.Size()})
				continue
			}
			f.Close()
		}
		for _, a := range out {
			a.f.Close()
		}
		return nil, fmt.Errorf("archive %s: %w", p, err)
	}
	return out, nil
}

// tarSize is what a file of n bytes takes in a tar: its header and its body in 512-byte
// blocks.
func tarSize(n int64) int64 { return 512 + (n+511)/512*512 }

func (s *Server) backupFailed(w http.ResponseWriter, err error) {
	s.Logger.Error("backup of the store", "err", err)
	writeError(w, perr.Wrap(err, perr.Internal, "internal", "backup: %v", err))
}

// backupFiles are the files a backup holds besides the ledger: the catalog's and the
// settings', as they are now.
func (s *Server) backupFiles() ([]catalog.File, error) {
	var files []catalog.File
	if s.Catalog != nil {
		var err error
		if files, err = s.Catalog.Files(); err != nil {
			return nil, err
		}
	}
	if s.Settings != nil {
		name, body, ok, err := s.Settings.File()
		if err != nil {
			return nil, err
		}
		if ok {
			files = append(files, catalog.File{Name: name, Body: body})
		}
	}
	return files, nil
}
