package mvcc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The data directory: what it may hold and how it is checked before it is
// served.
//
//	dir/mvcc.db                the data file (bbolt), up to the last checkpoint
//	dir/wal-<16 hex>.log       the write-ahead log's segments, oldest first
//	dir/mvcc.db.creating       a new data file being created (renamed into place once whole)
//
// A directory that does not exist, is empty or holds only lost+found
// becomes a new store. One that holds an etcd member/ directory, other files
// without a data file, or a data file that is not this store's is refused
// with ErrNotStore; a store whose files fail their checks, with a
// *DamageError.

const (
	dataFileName = "mvcc.db"
	creatingName = "mvcc.db.creating"
)

var errWouldBlock = errors.New("lock held elsewhere")

// dirLock is the exclusive lock of a data directory (flock(2) of the
// directory itself, so that nothing is created in a directory that turns
// out not to be a store).
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("mvcc: open %s: %w", dir, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w: %s is a file, not a directory", ErrNotStore, dir)
		}
		return nil, err
	}
	if err := tryLock(f, true); err != nil {
		f.Close()
		if err == errWouldBlock {
			return nil, fmt.Errorf("%w: %s (a running watchspec serve, or another open store, holds it; stop it first)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("mvcc: lock %s: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // releases the lock
		l.f = nil
	}
}

// dirKind is what a directory holds.
type dirKind int

const (
	dirNew   dirKind = iota // nothing yet: a new store
	dirStore                // a store (perhaps damaged)
)

// classify says what dir holds, from its entries. It returns ErrNotStore
// for something else.
func classify(dir string) (dirKind, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, fmt.Errorf("mvcc: read %s: %w", dir, err)
	}
	var names, other []string
	hasData, hasLog := false, false
	for _, e := range entries {
		n := e.Name()
		names = append(names, n)
		switch _, isSeg := parseSegmentName(n); {
		case n == "member" && e.IsDir():
			return 0, nil, fmt.Errorf("%w: %s holds an etcd data directory (member/); watchspec keeps its own format: give it an empty or new directory", ErrNotStore, dir)
		case n == dataFileName:
			if !e.Type().IsRegular() {
				return 0, nil, fmt.Errorf("%w: %s/%s is not a regular file", ErrNotStore, dir, n)
			}
			hasData = true
		case isSeg:
			hasLog = true
		case n == creatingName, n == "lost+found":
		default:
			other = append(other, n)
		}
	}
	switch {
	case hasData || hasLog:
		return dirStore, names, nil
	case len(other) > 0:
		sort.Strings(other)
		if len(other) > 5 {
			other = append(other[:5], "…")
		}
		return 0, nil, fmt.Errorf("%w: %s is not empty and holds no store (%s); give watchspec an empty or new directory", ErrNotStore, dir, strings.Join(other, ", "))
	}
	return dirNew, names, nil
}

// inspection is what a check of a store's directory found: the data file,
// the log, what a replay of the log adds, and any damage.
type inspection struct {
	dir      string
	names    []string
	bolt     *boltInfo
	dataSize int64
	segs     []*scannedSegment
	logBytes int64
	replay   []frame // the frames to replay, in order
	rev      int64   // the revision after the replay
	compact  int64   // the scheduled compaction after the replay
	lastSeq  uint64
	notes    []string
	damage   []Damage
}

func (in *inspection) damaged(file string, off int64, format string, args ...any) {
	in.damage = append(in.damage, Damage{File: file, Offset: off, What: fmt.Sprintf(format, args...)})
}

// inspect checks the store in dir (whose entries are names): the data file
// with checkBolt, the log with scanSegment, and how they fit together. It
// changes nothing. It returns ErrNotStore (or ErrLocked) errors; damage is
// in the inspection.
func inspect(dir string, names []string) (*inspection, error) {
	in := &inspection{dir: dir, names: names}
	if err := in.checkLeases(); err != nil {
		return nil, err
	}
	dataPath := filepath.Join(dir, dataFileName)
	seqs := listSegments(names)
	f, err := os.Open(dataPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		in.damaged(dataPath, -1, "the data file is missing (the log is there)")
		in.bolt = &boltInfo{}
	case err != nil:
		return nil, fmt.Errorf("mvcc: open %s: %w", dataPath, err)
	default:
		defer f.Close()
		// A process of an older watchspec holds only bbolt's lock of the
		// data file: see it before reading a file being written.
		if err := tryLock(f, false); err == errWouldBlock {
			return nil, fmt.Errorf("%w: %s (another process holds its data file; stop it first)", ErrLocked, dir)
		}
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("mvcc: stat %s: %w", dataPath, err)
		}
		in.dataSize = fi.Size()
		in.bolt = checkBolt(f, fi.Size(), dataPath)
	}
	b := in.bolt
	switch {
	case b.notBolt && len(seqs) == 0:
		return nil, fmt.Errorf("%w: %s: %s", ErrNotStore, dataPath, b.damage[0].What)
	case b.foreign != "" && len(seqs) == 0:
		return nil, fmt.Errorf("%w: %s is a bbolt file but not a watchspec store: %s", ErrNotStore, dataPath, b.foreign)
	case b.foreign != "":
		// The log says this is a store: its data file is damaged, not foreign.
		b.damage = append(b.damage, Damage{File: dataPath, Offset: -1, What: "not laid out as a watchspec data file (" + b.foreign + "), though the log is this store's"})
	case b.format1:
		return nil, fmt.Errorf("%w: %s was written by an older watchspec (store format 1, records without checksums), which this one does not serve; start from an empty directory", ErrNotStore, dataPath)
	}
	in.damage = append(in.damage, b.damage...)
	if b.metaUsed >= 0 && !b.metas[1-b.metaUsed].valid {
		in.notes = append(in.notes, fmt.Sprintf("%s: meta page %d is unusable (%s): a checkpoint cut by a crash, or damage; bbolt uses meta page %d (transaction %d), and the log must cover what came after it",
			dataPath, 1-b.metaUsed, b.metas[1-b.metaUsed].err, b.metaUsed, b.meta.txid))
	}

	// The log.
	for _, seq := range seqs {
		p := filepath.Join(dir, segmentName(seq))
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("mvcc: read %s: %w", p, err)
		}
		in.logBytes += int64(len(data))
		in.segs = append(in.segs, scanSegment(p, seq, data))
		in.lastSeq = seq
	}
	if len(in.damage) > 0 {
		return in, nil // the data file is damaged: the rest is for the report only
	}
	st := b.state
	in.rev, in.compact = st.rev, st.sched
	if len(in.segs) == 0 {
		if st.rev != 1 || b.records != 0 {
			in.damaged(filepath.Join(dir, "wal-*.log"), -1, "the log is missing: the data file holds revisions up to %d; anything acknowledged after it is lost", st.rev)
		}
		return in, nil
	}
	// Segments: consecutive, this store's, each continuing from the one
	// before; the first no later than the data file.
	var pos, posCompact int64
	for i, s := range in.segs {
		last := i == len(in.segs)-1
		if i > 0 && s.seq != in.segs[i-1].seq+1 {
			in.damaged(filepath.Join(dir, segmentName(in.segs[i-1].seq+1)), -1, "log segment missing (the next one is %s)", filepath.Base(s.path))
			return in, nil
		}
		if s.hdrBad != "" {
			if last && s.tail == tailTorn {
				in.notes = append(in.notes, fmt.Sprintf("%s: %s; nothing in it was acknowledged", s.path, s.what))
				break
			}
			in.damaged(s.path, 0, "%s", s.hdrBad)
			return in, nil
		}
		if s.hdr.storeID != st.storeID {
			in.damaged(s.path, 0, "the segment belongs to another store (ID %016x, this one's is %016x)", s.hdr.storeID, st.storeID)
			return in, nil
		}
		if i == 0 {
			if s.hdr.base > st.rev || (s.hdr.base == st.rev && s.hdr.baseCompact > st.sched) {
				in.damaged(dataPath, -1, "the data file holds revisions up to %d (compaction %d), but the log starts after revision %d (compaction %d): what came between is lost (a data file older than its log: a damaged meta page, or a data file copied back)",
					st.rev, st.sched, s.hdr.base, s.hdr.baseCompact)
				return in, nil
			}
		} else if s.hdr.base != pos || s.hdr.baseCompact != posCompact {
			prev := in.segs[i-1]
			in.damaged(prev.path, prev.end, "the segment ends at revision %d (compaction %d) but the next one, %s, starts after revision %d (compaction %d): frames are missing (%s)",
				pos, posCompact, filepath.Base(s.path), s.hdr.base, s.hdr.baseCompact, prev.whatOrEnd())
			return in, nil
		} else if prev := in.segs[i-1]; prev.tail != tailClean {
			in.notes = append(in.notes, fmt.Sprintf("%s: %s; the next segment continues from before it, so it was never acknowledged", prev.path, prev.what))
		}
		pos, posCompact = s.lastRev()
		for _, f := range s.frames {
			in.compact = max(in.compact, f.compact)
			if f.prev < st.rev && f.rev > st.rev {
				in.damaged(s.path, f.off, "the group commit of revisions %d to %d straddles the data file's revision %d", f.prev+1, f.rev, st.rev)
				return in, nil
			}
			if f.rev > st.rev {
				in.replay = append(in.replay, f.frame)
			} else if f.compact > st.sched {
				in.replay = append(in.replay, frame{prev: f.prev, rev: f.rev, compact: f.compact})
			}
		}
		if last {
			switch s.tail {
			case tailTorn:
				in.notes = append(in.notes, fmt.Sprintf("%s: %s; discarded (never acknowledged)", s.path, s.what))
			case tailBad:
				in.damaged(s.path, s.end, "%s%s", s.what, s.afterDamage())
				return in, nil
			}
		}
	}
	if pos < st.rev {
		in.damaged(in.segs[len(in.segs)-1].path, -1, "the log ends at revision %d, before the data file's %d: a segment was lost or replaced", pos, st.rev)
		return in, nil
	}
	in.rev = max(st.rev, pos)
	if n := len(in.replay); n > 0 {
		in.notes = append(in.notes, fmt.Sprintf("the log holds %d group commits the data file does not (revisions %d to %d): they are replayed",
			n, in.replay[0].prev+1, in.replay[n-1].rev))
	}
	return in, nil
}

func (s *scannedSegment) whatOrEnd() string {
	if s.tail == tailClean {
		return "the segment ends cleanly"
	}
	return s.what
}

// afterDamage says what is intact after damage in a segment.
func (s *scannedSegment) afterDamage() string {
	if len(s.after) == 0 {
		return "; nothing readable follows it in the segment"
	}
	return fmt.Sprintf("; %d intact group commits follow it (revisions %d to %d)", len(s.after), s.after[0].prev+1, s.after[len(s.after)-1].rev)
}

// trusted says what can still be trusted in a damaged directory.
func (in *inspection) trusted() string {
	var parts []string
	b := in.bolt
	switch {
	case b == nil || !b.hasState:
	case len(b.damage) == 0:
		parts = append(parts, fmt.Sprintf("the data file verifies (revisions up to %d, %d records)", b.state.rev, b.records))
	default:
		parts = append(parts, fmt.Sprintf("the data file's state verifies (revisions up to %d, compaction %d)", b.state.rev, b.state.sched))
	}
	frames, bad := 0, 0
	var lo, hi int64 = -1, -1
	for _, s := range in.segs {
		for _, f := range append(append([]scannedFrame(nil), s.frames...), s.after...) {
			frames++
			if lo < 0 {
				lo = f.prev + 1
			}
			hi = f.rev
		}
		if s.hdrBad != "" {
			bad++
		}
	}
	switch {
	case frames > 0:
		parts = append(parts, fmt.Sprintf("%d group commits of the log verify (revisions %d to %d)", frames, lo, hi))
	case len(in.segs) > bad:
		parts = append(parts, "the log holds no group commit")
	}
	if _, rep, err := salvageDir(in.dir, in.names); err != nil {
		parts = append(parts, fmt.Sprintf("Recover cannot help (%v)", err))
	} else {
		p := fmt.Sprintf("Recover would keep %d records that verify, up to revision %d (compact revision %d)", rep.Records, rep.Revision, rep.CompactRevision)
		if len(rep.Lost) > 0 {
			p += ", and lose: " + strings.Join(rep.Lost, "; ")
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}
