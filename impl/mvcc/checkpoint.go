package mvcc

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Checkpoints bring the data file up to date with the log.
//
// The writers never touch the data file: a group commit is durable once its
// frame is in the log, and its records are kept in memory (Store.mem). A
// checkpoint (1) rotates the log — the segment being appended to is closed
// and a new one started, whose header says the revision and compaction it
// continues from; (2) writes the records up to that revision, and the
// state (revision, scheduled compaction), into the data file in one bbolt
// transaction, committed with its fsyncs; (3) removes the segments before
// the new one, oldest first. A crash between any two steps leaves a
// directory that Open reads back whole: after (1) the log still holds
// everything; after (2) the data file holds what the older segments hold,
// and replaying them again skips the records the data file has (by
// revision); a segment removed in (3) is one the data file covers.

// Checkpoint writes the records the data file does not hold yet into it and
// removes the log segments that held them. The store checkpoints by itself
// (see Options.CheckpointBytes and CheckpointInterval, and on Close); call it
// before copying the data file alone, or in tests.
func (s *Store) Checkpoint() error {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return ErrClosed
	}
	return s.checkpoint()
}

func (s *Store) checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	start := time.Now()

	// 1. Rotate. The next segment's file is created (and its directory
	// entry made durable) outside the log's lock; under it, only the header
	// is written and the segments swapped, so that writers wait for no fsync.
	s.walMu.Lock()
	if s.seg == nil {
		s.walMu.Unlock()
		return ErrClosed
	}
	rotate := s.seg.off > segmentHeaderLen
	seq := s.segs[len(s.segs)-1] + 1
	s.walMu.Unlock()
	var next *segment
	if rotate {
		var err error
		if next, err = openSegment(s.opts.FS, s.dir, seq, s.opts.UnsafeNoFsync); err != nil {
			return s.checkpointFailed(err)
		}
		s.opts.point("checkpoint: segment created")
	}
	s.walMu.Lock()
	if s.seg == nil {
		s.walMu.Unlock()
		if next != nil {
			next.abandon(ErrClosed)
		}
		return ErrClosed
	}
	rev, compact := s.logRev, s.logCompact
	s.memMu.Lock()
	ckRev, ckCompact := s.ckptRev, s.ckptCompact
	s.memMu.Unlock()
	dirty := rev > ckRev || compact > ckCompact
	if next != nil {
		if err := next.start(segmentHeader{storeID: s.storeID, seq: seq, base: rev, baseCompact: compact}); err != nil {
			s.walMu.Unlock()
			return s.checkpointFailed(err)
		}
		s.seg.close()
		s.seg = next
		s.segs = append(s.segs, seq)
	}
	older := append([]uint64(nil), s.segs[:len(s.segs)-1]...)
	s.walMu.Unlock()
	if next != nil {
		// The header must be durable before the segments before it go. If
		// its fsync fails, the state of the segment is unknown: writes stop.
		if err := next.f.Sync(); err != nil && !s.opts.UnsafeNoFsync {
			s.mu.Lock()
			if s.failed == nil {
				s.failed = fmt.Errorf("mvcc: the log failed (a new segment's header did not sync), store is read-only until reopened: %w", err)
			}
			s.mu.Unlock()
			return s.checkpointFailed(err)
		}
	}
	if !dirty && len(older) == 0 {
		return nil
	}
	s.opts.point("checkpoint: rotated")

	// 2. The data file, in parts.
	for done := !dirty; !done; {
		var err error
		if done, err = s.checkpointPart(rev, compact); err != nil {
			return s.checkpointFailed(err)
		}
	}

	// 3. The segments the data file now covers, oldest first.
	for _, seq := range older {
		if err := s.opts.FS.Remove(filepath.Join(s.dir, segmentName(seq))); err != nil {
			return fmt.Errorf("mvcc: checkpoint: %w", err)
		}
		s.walMu.Lock()
		s.segs = s.segs[1:]
		s.walMu.Unlock()
		s.opts.point("checkpoint: removed a segment")
	}
	if len(older) > 0 && !s.opts.UnsafeNoFsync {
		if err := s.opts.FS.SyncDir(s.dir); err != nil {
			return fmt.Errorf("mvcc: checkpoint: %w", err)
		}
	}
	s.stats.checkpoints.Add(1)
	s.opts.Logger.Debug("mvcc: checkpoint", "dir", s.dir, "revision", rev, "took", time.Since(start))
	return nil
}

// checkpointPartBytes is the most bytes of records one part of a
// checkpoint writes (unless a single group commit holds more): a quarter of
// CheckpointBytes, at most 1 MiB (1 MiB when checkpoints by size are off).
// A part is one transaction of the data file, whose pages bbolt builds in
// memory before it writes them: the part bounds that copy, and the time a
// writer waiting for room (see Store.waitRoom) waits.
func (s *Store) checkpointPartBytes() int64 {
	if b := s.opts.CheckpointBytes; b > 0 {
		return max(min(b/4, maxCheckpointPartBytes), 1)
	}
	return maxCheckpointPartBytes
}

const maxCheckpointPartBytes = 1 << 20

// checkpointFillPercent is how full bbolt fills the pages of the records
// bucket: its keys are revisions, appended in order, so nearly full pages
// stay nearly full (bbolt's default, 0.5, suits random inserts).
const checkpointFillPercent = 0.9

// checkpointPart writes the next part of a checkpoint that goes up to the
// revision rev and the scheduled compaction compact: the records of the
// oldest group commits kept in memory, whole group commits only, at most
// checkpointPartBytes of them (at least one group commit), together with
// the state after the last of them, in one transaction of the data file.
// Then it drops them from memory and wakes the writers waiting for room.
// It reports whether the data file now holds everything up to (rev,
// compact).
//
// A crash between two parts is a crash after step (2) of a checkpoint that
// went only as far as the part: the data file's revision is the end of a
// frame of the log (Open refuses a frame that straddles it), the log still
// holds everything after it, and Open replays that — including a
// compaction scheduled in a frame the data file already covers, whose
// state then says the compaction as of the part's last frame.
func (s *Store) checkpointPart(rev, compact int64) (done bool, err error) {
	s.memMu.Lock()
	limit := s.checkpointPartBytes()
	nf, nrec := 0, 0
	var bytes int64
	for nf < len(s.memFrames) {
		f := s.memFrames[nf]
		if f.rev > rev || f.rev == rev && f.compact > compact {
			break // after the rotation: in the segment being appended to
		}
		if nf > 0 && bytes+f.bytes > limit {
			break
		}
		nf, nrec, bytes = nf+1, nrec+f.recs, bytes+f.bytes
	}
	if nf == 0 || nrec > len(s.mem) || nrec > 0 && s.mem[nrec-1].rev.main != s.memFrames[nf-1].rev {
		// Every durable group commit above the checkpoint is in memFrames
		// (commit adds it under the log's lock, before a rotation can see
		// its revision), and its records in mem.
		from := s.ckptRev
		s.memMu.Unlock()
		return false, fmt.Errorf("%w: the group commits kept in memory do not reach revision %d (compaction %d) from the checkpoint's %d", ErrCorrupt, rev, compact, from)
	}
	partRev, partCompact := s.memFrames[nf-1].rev, s.memFrames[nf-1].compact
	recs := s.mem[:nrec:nrec] // durable, never changed again
	s.memMu.Unlock()

	st := storeState{format: formatVersion, storeID: s.storeID, rev: partRev, sched: partCompact}
	err = s.boltUpdate(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKey)
		b.FillPercent = checkpointFillPercent
		for _, r := range recs {
			if err := b.Put(revKey(r.rev), r.val); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaState, sealBytes(metaState, st.encode()))
	})
	if err != nil {
		return false, err
	}
	done = partRev == rev && partCompact == compact
	if !done {
		s.opts.point("checkpoint: part committed")
	}
	s.opts.point("checkpoint: committed")

	// Readers of views published from now on read these records from the
	// data file (whose new read transaction is already published).
	s.memMu.Lock()
	s.ckptRev, s.ckptCompact = partRev, partCompact
	s.memBytes -= bytes
	s.mem = append([]memRecord(nil), s.mem[nrec:]...) // a new array: old views keep theirs
	s.memFrames = append(s.memFrames[:0], s.memFrames[nf:]...)
	if len(s.memFrames) == 0 {
		s.memSince = time.Time{}
	} else {
		s.memSince = time.Now()
	}
	v := s.view.Load()
	pub := 0
	for pub < len(s.mem) && s.mem[pub].rev.main <= v.rev {
		pub++
	}
	s.view.Store(&view{rev: v.rev, compactRev: v.compactRev, ckptRev: partRev, mem: s.mem[:pub:pub]})
	s.ckptFailing = false
	s.memRoom.Broadcast()
	s.memMu.Unlock()
	return done, nil
}

// checkpointFailed raises the NOSPACE alarm for a full disk, and lets the
// writers waiting for room go on (see Store.waitRoom). The log still holds
// everything: nothing is lost, and the next checkpoint retries.
func (s *Store) checkpointFailed(err error) error {
	if isNoSpace(err) {
		s.raiseNoSpace(err)
	}
	s.memMu.Lock()
	s.ckptFailing = true
	s.memRoom.Broadcast()
	s.memMu.Unlock()
	return fmt.Errorf("mvcc: checkpoint: %w", err)
}

// boltUpdate runs fn in a write transaction of the data file and commits
// it, then publishes a new shared read transaction. Readers wait during the
// commit: bbolt may have to remap its file, which it can do only once no
// read transaction is open.
func (s *Store) boltUpdate(fn func(*bolt.Tx) error) error {
	s.boltMu.Lock()
	defer s.boltMu.Unlock()
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	unblock := s.retireSnap()
	start := time.Now()
	err = tx.Commit()
	d := time.Since(start)
	unblock(true)
	if err != nil {
		return err
	}
	s.stats.backendCommits.Add(1)
	if s.opts.OnBackendCommit != nil {
		s.opts.OnBackendCommit(d)
	}
	return nil
}

// checkpointer runs checkpoints in the background: when the records kept in
// memory reach CheckpointBytes, and about every CheckpointInterval while
// there is something to checkpoint.
type checkpointer struct {
	s       *Store
	wake    chan struct{}
	quit    chan struct{}
	stopped chan struct{}
}

func (c *checkpointer) start(s *Store) {
	c.s = s
	c.wake = make(chan struct{}, 1)
	c.quit = make(chan struct{})
	c.stopped = make(chan struct{})
	go c.loop()
}

func (c *checkpointer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) stop() {
	close(c.quit)
	<-c.stopped
}

func (c *checkpointer) loop() {
	defer close(c.stopped)
	s := c.s
	var tick <-chan time.Time
	if d := s.opts.CheckpointInterval; d > 0 {
		t := time.NewTicker(d / 2)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.quit:
			return
		case <-c.wake:
		case <-tick:
			s.memMu.Lock()
			due := !s.memSince.IsZero() && time.Since(s.memSince) >= s.opts.CheckpointInterval/2
			s.memMu.Unlock()
			s.walMu.Lock()
			due = due || len(s.segs) > 1 || s.logCompact > s.ckptCompactLocked()
			s.walMu.Unlock()
			if !due {
				continue
			}
		}
		if s.noSpace.Load() {
			continue // DisarmAlarm wakes us
		}
		if err := s.checkpoint(); err != nil {
			if !errors.Is(err, ErrClosed) {
				s.opts.Logger.Warn("mvcc: checkpoint failed; the log keeps everything", "dir", s.dir, "err", err)
			}
			continue
		}
		// Writers that kept writing during the checkpoint left at least a
		// part's worth: checkpoint it now rather than let it grow to
		// CheckpointBytes. Under bulk writes checkpoints thus follow one
		// another, each writing what came during the one before, and the
		// store holds little more than what comes during one checkpoint.
		s.memMu.Lock()
		again := s.opts.CheckpointBytes > 0 && s.memBytes >= s.checkpointPartBytes()
		s.memMu.Unlock()
		if again {
			c.poke()
		}
	}
}

func (s *Store) ckptCompactLocked() int64 {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	return s.ckptCompact
}
