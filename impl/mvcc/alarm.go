package mvcc

import (
	"fmt"
	"os"
	"path/filepath"
)

// Alarm is a condition of the store that stops some requests until it is
// disarmed, as etcd's alarms (etcdserverpb.AlarmType; the values are
// etcd's).
type Alarm int32

// AlarmNoSpace is etcd's NOSPACE: a write ran out of disk space. While it is
// raised, Puts and Txns that put fail with ErrNoSpace; reads, deletes and
// compactions go on, so that space can be freed.
const AlarmNoSpace Alarm = 1

func (a Alarm) String() string {
	if a == AlarmNoSpace {
		return "NOSPACE"
	}
	return fmt.Sprintf("Alarm(%d)", int32(a))
}

// Alarms returns the alarms raised, none when all is well. An etcd server
// answers Maintenance.Alarm(GET) and Status's errors from it.
func (s *Store) Alarms() []Alarm {
	if s.noSpace.Load() {
		return []Alarm{AlarmNoSpace}
	}
	return nil
}

// RaiseAlarm raises an alarm by hand (etcd's Alarm ACTIVATE).
func (s *Store) RaiseAlarm(a Alarm) error {
	if a != AlarmNoSpace {
		return fmt.Errorf("mvcc: unknown alarm %v", a)
	}
	s.raiseNoSpace(nil)
	return nil
}

// DisarmAlarm clears an alarm (etcd's Alarm DEACTIVATE) and reports whether
// it was raised. Disarming NOSPACE lets writes through again and retries the
// checkpoint and compaction that ran out of space; if the disk is still
// full, the next write that needs space raises it again.
func (s *Store) DisarmAlarm(a Alarm) bool {
	if a != AlarmNoSpace || !s.noSpace.CompareAndSwap(true, false) {
		return false
	}
	s.opts.Logger.Info("mvcc: alarm disarmed", "dir", s.dir, "alarm", AlarmNoSpace)
	s.ckpt.poke()
	s.compactor.poke()
	return true
}

func (s *Store) raiseNoSpace(cause error) {
	if s.noSpace.CompareAndSwap(false, true) {
		// Checkpoints stop: writers waiting for one to make room go on.
		s.memMu.Lock()
		s.memRoom.Broadcast()
		s.memMu.Unlock()
		s.opts.Logger.Error("mvcc: alarm raised: no space left; puts are refused until the alarm is disarmed", "dir", s.dir, "alarm", AlarmNoSpace, "cause", cause)
	}
}

// Stats are the store's figures, for metrics (etcd's names in brackets).
type Stats struct {
	Revision, CompactRevision int64
	// CheckpointRevision: the data file holds every record up to it.
	CheckpointRevision int64
	// DBSize is the size of the data file in bytes
	// (etcd_mvcc_db_total_size_in_bytes); DBSizeInUse the bytes of its
	// pages in use (etcd_mvcc_db_total_size_in_use_in_bytes).
	DBSize, DBSizeInUse int64
	// LogBytes is the size of the log's segments. MemBytes is the bytes of
	// the durable records the store holds in memory because the data file
	// does not hold them yet (those a checkpoint is writing included); it
	// stays below twice Options.CheckpointBytes, plus one group commit,
	// while checkpoints succeed. MemWaits counts the times the writers
	// waited for a checkpoint to make room (see Options.CheckpointBytes).
	LogBytes, MemBytes, MemWaits int64
	// GroupCommits counts the batches appended to the log, LogSyncs their
	// fdatasyncs (one each, none with UnsafeNoFsync), Checkpoints the
	// checkpoints, BackendCommits the commits of the data file (checkpoints
	// and compaction batches).
	GroupCommits, LogSyncs, Checkpoints, BackendCommits int64
}

// Stats returns the store's figures now.
func (s *Store) Stats() Stats {
	v := s.view.Load()
	st := Stats{
		Revision: v.rev, CompactRevision: v.compactRev, CheckpointRevision: v.ckptRev,
		GroupCommits: s.stats.groupCommits.Load(), LogSyncs: s.stats.logSyncs.Load(),
		Checkpoints: s.stats.checkpoints.Load(), BackendCommits: s.stats.backendCommits.Load(),
	}
	if fi, err := os.Stat(filepath.Join(s.dir, dataFileName)); err == nil {
		st.DBSize = fi.Size()
	}
	if sn, err := s.acquire(); err == nil {
		used := sn.tx.Size()
		sn.release()
		bs := s.db.Stats()
		st.DBSizeInUse = used - int64(bs.FreePageN+bs.PendingPageN)*int64(s.db.Info().PageSize)
	}
	s.walMu.Lock()
	for _, seq := range s.segs {
		if fi, err := os.Stat(filepath.Join(s.dir, segmentName(seq))); err == nil {
			st.LogBytes += fi.Size()
		}
	}
	s.walMu.Unlock()
	s.memMu.Lock()
	st.MemBytes = s.memBytes
	st.MemWaits = s.stats.memWaits.Load()
	s.memMu.Unlock()
	return st
}
