package mvcc

import (
	"fmt"
	"strings"
)

// Report is what [Check] found in a data directory.
type Report struct {
	Dir string
	// Revision and CompactRevision are what Open would serve.
	Revision, CompactRevision int64
	// CheckpointRevision: the data file holds every record up to it, the
	// log the rest.
	CheckpointRevision int64
	// FinishedCompaction is the last compaction whose records are all
	// deleted (-1 if none); below CompactRevision, Open resumes the
	// deletion (a compaction a stop interrupted).
	FinishedCompaction int64
	// Records is the number of records in the data file (every one
	// verified), Pages its pages in use, DataFileBytes its size.
	Records, Pages, DataFileBytes int64
	// LogSegments and LogBytes describe the log; Replay is the number of
	// group commits it holds beyond the data file (Open replays them).
	LogSegments int
	LogBytes    int64
	Replay      int
	// Notes describe what Open would do beyond serving: discard a write a
	// crash cut, rely on the log for an unusable meta page.
	Notes []string
	// Damage lists what is wrong, the first being what stopped the check;
	// Trusted says what can still be trusted. Open refuses a directory with
	// damage.
	Damage  []Damage
	Trusted string
}

// OK reports whether the directory is fit to serve.
func (r *Report) OK() bool { return len(r.Damage) == 0 }

// String is the report in words, one fact a line.
func (r *Report) String() string {
	var b strings.Builder
	if r.OK() {
		fmt.Fprintf(&b, "%s: OK: revision %d, compact revision %d\n", r.Dir, r.Revision, r.CompactRevision)
	} else {
		fmt.Fprintf(&b, "%s: DAMAGED\n", r.Dir)
	}
	fmt.Fprintf(&b, "data file: %d bytes, %d pages in use, %d records verified, checkpointed up to revision %d, compaction finished up to %d\n",
		r.DataFileBytes, r.Pages, r.Records, r.CheckpointRevision, r.FinishedCompaction)
	fmt.Fprintf(&b, "log: %d segment(s), %d bytes, %d group commit(s) beyond the data file\n", r.LogSegments, r.LogBytes, r.Replay)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, d := range r.Damage {
		fmt.Fprintf(&b, "damage: %s\n", d)
	}
	if !r.OK() {
		fmt.Fprintf(&b, "what can still be trusted: %s\n", r.Trusted)
	}
	return b.String()
}

// Check verifies the store in dir without changing anything: everything
// Open checks before it serves — the data file's structure and every
// record's checksum, every frame of the log, how they fit together — and
// says what Open would replay or discard. It takes the directory's lock, so
// it fails with ErrLocked on a store in use; ErrNotStore when dir holds no
// store. Damage is in the Report, not an error.
func Check(dir string) (*Report, error) {
	lk, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lk.unlock()
	kind, names, err := classify(dir)
	if err != nil {
		return nil, err
	}
	if kind == dirNew {
		return nil, fmt.Errorf("%w: %s holds no store (it is empty)", ErrNotStore, dir)
	}
	in, err := inspect(dir, names)
	if err != nil {
		return nil, err
	}
	return in.report(), nil
}

func (in *inspection) report() *Report {
	b := in.bolt
	r := &Report{
		Dir: in.dir, Revision: in.rev, CompactRevision: in.compact,
		CheckpointRevision: b.state.rev, FinishedCompaction: b.finished,
		Records: b.records, Pages: b.pages, DataFileBytes: in.dataSize,
		LogSegments: len(in.segs), LogBytes: in.logBytes, Replay: len(in.replay),
		Notes: in.notes, Damage: in.damage,
	}
	if !r.OK() {
		r.Trusted = in.trusted()
	}
	return r
}
