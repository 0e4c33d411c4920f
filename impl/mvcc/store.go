package mvcc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Options configure a [Store]. The zero Options are etcd-like defaults.
type Options struct {
	// OnCommit, if set, is called once for every write revision, in revision
	// order, after the revision is durable and readable and before any
	// writer of its batch is answered. It runs on the committer (the
	// store's commit goroutine, or the goroutine of a writer that commits
	// its own write), so it must be quick, must not block, and must not call
	// the Store's write methods. The Commit and its events are shared: do not
	// modify them. Every non-creating event carries its PrevKV.
	OnCommit func(Commit)

	// OnCommits, if set, is called instead of OnCommit once for every group
	// commit, with its write revisions in order (consecutive revisions that
	// became durable and readable together), under the same rules. A
	// watcher can then deliver them together.
	OnCommits func([]Commit)

	// MaxBatch bounds the number of requests one group commit applies
	// (default 1024).
	MaxBatch int

	// CompactionBatchLimit is the number of records the physical compaction
	// deletes per transaction of the data file (default 1000, as etcd's
	// --experimental-compaction-batch-limit).
	CompactionBatchLimit int

	// CompactionSleepInterval is the pause between two compaction
	// transactions (default 0; etcd pauses 10ms).
	CompactionSleepInterval time.Duration

	// CheckpointBytes: once the records written since the last checkpoint
	// reach this many bytes, they are checkpointed into the data file and
	// the log segments that held them removed (default 2 MiB; negative:
	// never by size). Until then they are also kept in memory. A
	// checkpoint writes them in parts of at most a quarter of this (and
	// at most 1 MiB), one transaction of the data file each; while the
	// writers keep writing, checkpoints follow one another. The memory
	// this bounds is the writers' back-pressure: once the records not yet
	// checkpointed reach twice CheckpointBytes, the writers wait (the
	// commit goroutine does) until a part is written, and Stats.MemWaits
	// counts it. Negative: no such bound, memory grows with the writes
	// until CheckpointInterval or Checkpoint.
	CheckpointBytes int64

	// CheckpointInterval: a record is checkpointed at most about this long
	// after it was written (default 5 s; negative: never by time).
	CheckpointInterval time.Duration

	// UnsafeNoFsync skips every fsync. A write is then acknowledged before
	// it is durable and a machine crash can lose it (a process crash cannot).
	// For tests and benchmarks that do not measure durability only.
	UnsafeNoFsync bool

	// FS is the file system of the write-ahead log (default: the operating
	// system's). Tests inject faults and count fsyncs through it.
	FS FS

	// Logger receives the store's events: a replay after an unclean stop,
	// a write a crash cut and that was discarded, alarms (default: none).
	Logger *slog.Logger

	// OnLogSync, if set, is called with the duration of every fdatasync of
	// the log (etcd's etcd_disk_wal_fsync_duration_seconds), on the commit
	// goroutine.
	OnLogSync func(time.Duration)

	// OnBackendCommit, if set, is called with the duration of every commit
	// of the data file — checkpoints and compaction batches (etcd's
	// etcd_disk_backend_commit_duration_seconds).
	OnBackendCommit func(time.Duration)

	// compactionHook, if set, runs after every committed compaction batch
	// (numbered from 1; done marks the last). Tests use it to snapshot the
	// data file between batches.
	compactionHook func(rev int64, batch int, done bool)

	// testPoint, if set, is called at the named points of a checkpoint and a
	// compaction; the crash test kills the process there.
	testPoint func(point string)
}

func (o *Options) setDefaults() {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1024
	}
	if o.CompactionBatchLimit <= 0 {
		o.CompactionBatchLimit = 1000
	}
	if o.CheckpointBytes == 0 {
		o.CheckpointBytes = 2 << 20
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 5 * time.Second
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *Options) point(name string) {
	if o.testPoint != nil {
		o.testPoint(name)
	}
}

// Store is a durable MVCC key-value store with etcd's semantics: a global
// revision that starts at 1 and grows by one per writing request, every
// version of every key readable by revision down to the compact revision,
// transactions, and compaction (docs/SPEC.md §2).
//
// # Durability
//
// Every write is applied by one committer at a time: a writer that finds
// no batch being committed commits its own write in its goroutine; writers
// that arrive while a batch is being made durable wait together and are
// applied, in arrival order, in the next one by the store's commit
// goroutine (group commit): the batch is appended to the
// write-ahead log as one frame and made durable by one fdatasync, which
// acknowledges them all. A write method returns only after that; a crash
// afterwards loses nothing it acknowledged. The data file (bbolt) is
// brought up to date from memory by checkpoints, off the write path (see
// [Options.CheckpointBytes]); Open replays what the log holds beyond it. The
// revision never decreases across restarts. Writers that outpace the
// checkpoints wait for them once twice CheckpointBytes of records are held
// in memory ([Stats].MemBytes, MemWaits), so that memory stays bounded.
//
// # Integrity
//
// Every record, in the log and in the data file, carries a CRC-32C; every
// log frame too. Open checks the whole data directory before serving it —
// the data file's structure before bbolt opens it, every record's checksum,
// the log's frames — and refuses a damaged one with a [*DamageError] that
// says what is damaged and what can still be trusted. [Check] does the same
// on a stopped directory; [Recover] keeps what verifies.
//
// # Compaction
//
// Compact makes every revision below its argument unreadable at once and
// durably, then deletes the unreachable records in the background, in
// batches of CompactionBatchLimit records, oldest first. A crash part-way
// leaves a data file that reopens with the same revision and compact
// revision and finishes the job (etcd#17780, etcd#19179). The state of every
// key at the compact revision stays readable, including a tombstone exactly
// at it, so that a watch from the compact revision sees a DELETE there
// (etcd#18089).
//
// # Disk full
//
// A write that runs out of disk space fails with [ErrNoSpace], takes
// nothing with it, and raises the NOSPACE alarm: Puts and Txns that put are
// refused until [Store.DisarmAlarm] (etcd's behaviour); reads, deletes and
// compactions go on. Once space is freed and the alarm disarmed, writes
// resume, without a restart.
//
// # Concurrency
//
// All methods are safe for concurrent use. Reads never wait for writes to
// reach the disk: they see the latest durable revision, and they share one
// read transaction of the data file, so that a writer never queues behind
// them. Reads and writes are linearizable.
type Store struct {
	dir     string
	opts    Options
	lock    *dirLock
	db      *bolt.DB
	idx     *index
	storeID uint64
	view    atomic.Pointer[view]     // what readers see; replaced after every commit
	snap    atomic.Pointer[snapshot] // the shared read transaction of the data file
	lt      leaseTable               // the leases (lease.go)

	mu      sync.Mutex
	queue   []*request    // requests waiting for the committer: only while one commits
	wake    chan struct{} // cap 1: the commit goroutine may have work
	closing bool
	// One committer at a time applies the batches: a writer that found no
	// group commit in progress (its own request, in its goroutine), or the
	// commit goroutine. handoff: a writer that committed found requests
	// queued meanwhile and left them to the commit goroutine.
	committing, handoff bool
	failed              error         // a write to the log failed in an unknown way: the store refuses writes
	done                chan struct{} // closed when the committer has exited

	// Committer-owned logical state: the revision and compact revision after
	// the requests applied so far, durable or not.
	crev, ccompact int64

	// The log (walMu): the segment being appended to and where the log ends.
	walMu      sync.Mutex
	seg        *segment
	segs       []uint64 // the segments on disk, oldest first
	logRev     int64    // the revision after the last frame appended
	logCompact int64    // the scheduled compaction after it

	// Records above the checkpoint, kept in memory (memMu).
	memMu       sync.Mutex
	mem         []memRecord // every record above ckptRev, in revision order (the last ones perhaps not yet durable)
	memFrames   []memFrame  // the durable group commits whose records are in mem, in order
	memBytes    int64       // the bytes of the durable records in mem
	memSince    time.Time   // when the oldest of them was written
	memRoom     *sync.Cond  // on memMu: signalled when memBytes drops or writers must stop waiting
	memNoWait   bool        // the committer must not wait for room any more (the store is closing)
	ckptFailing bool        // the last checkpoint failed: waiting for one to make room could be forever
	ckptRev     int64       // the data file holds every record up to it
	ckptCompact int64       // and this scheduled compaction

	boltMu sync.Mutex // one writer of the data file at a time
	ckptMu sync.Mutex // one checkpoint at a time
	ckpt   checkpointer

	compactor compactor
	noSpace   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	recovered Recovery

	stats struct {
		groupCommits, logSyncs, checkpoints, backendCommits, memWaits atomic.Int64
		ownCommits                                                    atomic.Int64 // writes committed by their writer's goroutine
	}
}

// memFrame is one durable group commit whose records are still in memory:
// the revision and scheduled compaction after it, its number of records and
// their bytes. A checkpoint writes whole group commits only, so that the
// data file's revision is always the end of a frame of the log.
type memFrame struct {
	rev, compact int64
	recs         int
	bytes        int64
}

// view is a consistent state readers load at once.
type view struct {
	rev        int64       // the latest durable revision
	compactRev int64       // the compact revision in force, -1 if none
	ckptRev    int64       // records up to it are read from the data file
	mem        []memRecord // the records above ckptRev up to rev
}

// snapshot is a read transaction of the data file shared by every reader
// until the next commit of the data file (a checkpoint or a compaction
// batch) replaces it. A reader holds mu.RLock while it reads; the writer of
// the data file takes mu.Lock to close the transaction before it commits
// (bbolt must be free to remap its file), then publishes the next one.
type snapshot struct {
	mu     sync.RWMutex
	tx     *bolt.Tx
	key    *bolt.Bucket
	closed bool
	err    error // set on the last one: why there is no next (ErrClosed)
}

// Bucket names in the data file.
var (
	bucketKey  = []byte("key")
	bucketMeta = []byte("meta")
)

// formatVersion is the store format: the layout of the data file's records
// and state (see docs/IMPLEMENTATION.md, "On disk").
const formatVersion = 2

// Recovery says what Open found and did: whether it replayed the log after
// an unclean stop, and what it discarded.
type Recovery struct {
	// Replayed is the number of group commits of the log that the data file
	// did not hold (after a crash, or a stop that could not checkpoint),
	// and From, To the revisions they cover.
	Replayed int
	From, To int64
	// Notes describe what was found and done, in words: a last write that
	// a crash cut (never acknowledged) and was discarded, an unusable meta
	// page the log covers.
	Notes []string
}

// Open opens the store whose data lives in the directory dir, creating a
// new one if dir does not exist or is empty. It checks the whole directory
// first (see [Check]) and refuses a damaged one with a [*DamageError], a
// directory that holds something else with ErrNotStore, and one another
// process holds with ErrLocked. It replays the log, and resumes any
// compaction a crash interrupted.
func Open(dir string, opts Options) (_ *Store, err error) {
	opts.setDefaults()
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is a file, not a directory", ErrNotStore, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mvcc: open %s: %w", dir, err)
	}
	lk, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lk.unlock()
		}
	}()
	kind, names, err := classify(dir)
	if err != nil {
		return nil, err
	}
	if kind == dirNew {
		if err := createStore(dir, opts); err != nil {
			return nil, err
		}
		if _, names, err = classify(dir); err != nil {
			return nil, err
		}
	}
	in, err := inspect(dir, names)
	if err != nil {
		return nil, err
	}
	if len(in.damage) > 0 {
		return nil, &DamageError{Dir: dir, Damage: in.damage, Trusted: in.trusted()}
	}
	os.Remove(filepath.Join(dir, creatingName)) // a creation that a crash cut after the store was whole
	leases, err := loadLeases(dir)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, dataFileName), 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         opts.UnsafeNoFsync,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (another process holds its data file)", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("mvcc: open %s: %w", dir, err)
	}
	s := &Store{dir: dir, opts: opts, lock: lk, db: db, idx: newIndex(), storeID: in.bolt.state.storeID,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.memRoom = sync.NewCond(&s.memMu)
	s.lt.init()
	s.lt.ttl = leases
	keep, err := s.recover(in)
	if err != nil {
		s.snapClose()
		db.Close()
		return nil, err
	}
	s.ckpt.start(s)
	s.compactor.start(s, keep)
	go s.commitLoop()
	if err := s.finishRevokes(); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// createStore creates a new, empty store in dir: the data file is built
// under another name and renamed into place once whole, so that a crash
// never leaves a data file that could be taken for an empty store.
func createStore(dir string, opts Options) error {
	tmp := filepath.Join(dir, creatingName)
	os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType, NoSync: opts.UnsafeNoFsync})
	if err != nil {
		return fmt.Errorf("mvcc: create %s: %w", tmp, err)
	}
	var id [8]byte
	rand.Read(id[:])
	st := storeState{format: formatVersion, storeID: binary.BigEndian.Uint64(id[:]), rev: 1, sched: -1}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucket(bucketKey); err != nil {
			return err
		}
		mb, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := mb.Put(metaState, sealBytes(metaState, st.encode())); err != nil {
			return err
		}
		return mb.Put(metaFinished, sealBytes(metaFinished, encodeFinished(-1)))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, dataFileName))
	}
	if err == nil && !opts.UnsafeNoFsync {
		err = opts.FS.SyncDir(dir)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mvcc: create a store in %s: %w", dir, err)
	}
	return nil
}

// sealBytes seals an encoded body under key.
func sealBytes(key, body []byte) []byte {
	b := append(make([]byte, sealLen, sealLen+len(body)), body...)
	reseal(key, b)
	return b
}

// recover rebuilds the key index from the data file, replays the log's
// frames the data file does not hold, starts a new log segment and
// checkpoints. If an acknowledged compaction was not physically finished, it
// returns the records that compaction keeps so that the compactor can
// finish it.
func (s *Store) recover(in *inspection) (keep map[revision]struct{}, err error) {
	st := in.bolt.state
	err = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKey).ForEach(func(k, v []byte) error {
			r, err := parseRevKey(k)
			if err != nil {
				return err
			}
			rec, err := openRecord(r, v, true)
			if err != nil {
				return err
			}
			s.idx.add(rec.kv.Key, indexRev{main: r.main, sub: r.sub, tomb: rec.tomb})
			s.lt.noteRecord(&rec)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("mvcc: recover: %w", err)
	}
	s.crev, s.ccompact = st.rev, st.sched
	s.ckptRev, s.ckptCompact = st.rev, st.sched
	for _, f := range in.replay {
		mf := memFrame{recs: len(f.recs)}
		for _, r := range f.recs {
			rec, err := openRecord(r.rev, r.val, true)
			if err != nil {
				return nil, fmt.Errorf("mvcc: replay: %w", err)
			}
			s.idx.add(rec.kv.Key, indexRev{main: r.rev.main, sub: r.rev.sub, tomb: rec.tomb})
			s.lt.noteRecord(&rec)
			s.mem = append(s.mem, memRecord{rev: r.rev, val: append([]byte(nil), r.val...)})
			mf.bytes += int64(len(r.val) + revKeyLen)
		}
		s.crev = max(s.crev, f.rev)
		s.ccompact = max(s.ccompact, f.compact)
		mf.rev, mf.compact = s.crev, s.ccompact
		s.memFrames = append(s.memFrames, mf)
		s.memBytes += mf.bytes
	}
	if len(s.mem) > 0 {
		s.memSince = time.Now()
	}
	s.recovered.Notes = in.notes
	if n := len(in.replay); n > 0 {
		s.recovered.Replayed, s.recovered.From, s.recovered.To = n, in.replay[0].prev+1, in.replay[n-1].rev
	}
	for _, n := range in.notes {
		s.opts.Logger.Warn("mvcc: recovery", "dir", s.dir, "note", n)
	}

	// A new segment for what comes next; the checkpoint below removes the
	// ones before it.
	s.logRev, s.logCompact = s.crev, s.ccompact
	for _, sg := range in.segs {
		s.segs = append(s.segs, sg.seq)
	}
	seg, err := createSegment(s.opts.FS, s.dir, segmentHeader{storeID: s.storeID, seq: in.lastSeq + 1, base: s.crev, baseCompact: s.ccompact}, s.opts.UnsafeNoFsync)
	if err != nil {
		return nil, fmt.Errorf("mvcc: open %s: %w", s.dir, err)
	}
	s.seg, s.segs = seg, append(s.segs, seg.hdr.seq)

	if err := s.openSnap(); err != nil {
		seg.close()
		return nil, err
	}
	s.publish()
	if s.ccompact >= 0 {
		keep = s.idx.compact(s.ccompact)
		if in.bolt.finished >= s.ccompact {
			keep = nil
		}
	}
	if err := s.checkpoint(); err != nil {
		// Everything is in the log: the store can run, and checkpoint later.
		s.opts.Logger.Warn("mvcc: checkpoint at open failed", "dir", s.dir, "err", err)
	}
	return keep, nil
}

// publish makes the committer's state visible to readers: the caller holds
// memMu, or is alone.
func (s *Store) publish() {
	s.view.Store(&view{rev: s.crev, compactRev: s.ccompact, ckptRev: s.ckptRev, mem: s.mem[:len(s.mem):len(s.mem)]})
}

// Revision returns the store's current revision: 1 for a fresh store, plus
// one for every request that wrote something.
func (s *Store) Revision() int64 { return s.view.Load().rev }

// CompactRevision returns the revision of the last compaction, or -1 when
// the store was never compacted.
func (s *Store) CompactRevision() int64 { return s.view.Load().compactRev }

// Recovery says what Open found and replayed.
func (s *Store) Recovery() Recovery { return s.recovered }

// Close stops the store: requests not yet applied fail with ErrClosed, the
// background compaction stops (the next Open resumes it), the records the
// data file does not hold yet are checkpointed into it and the files are
// closed. Close waits for requests being applied to finish. The data is
// safe whatever Close returns: a failed checkpoint leaves it in the log.
func (s *Store) Close() error { return s.close(true) }

// Kill stops the store the way a crash would, for tests of recovery: like
// Close, but nothing is checkpointed — the data file stays as the last
// checkpoint left it and the next Open replays the log. (A process crash
// can also cut the last write short; Kill stops between writes.)
func (s *Store) Kill() error { return s.close(false) }

func (s *Store) close(clean bool) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		pending := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, r := range pending {
			r.finish(nil, ErrClosed)
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
		// A committer waiting for room commits its batch (the log is still
		// open) instead of waiting for a checkpoint that may not come.
		s.memMu.Lock()
		s.memNoWait = true
		s.memRoom.Broadcast()
		s.memMu.Unlock()
		<-s.done
		s.compactor.stop()
		s.ckpt.stop()
		var err error
		if clean {
			err = s.checkpoint()
		}
		s.walMu.Lock()
		if s.seg != nil {
			if cerr := s.seg.close(); err == nil {
				err = cerr
			}
			s.seg = nil
		}
		s.walMu.Unlock()
		s.snapClose()
		if cerr := s.db.Close(); err == nil {
			err = cerr
		}
		s.lock.unlock()
		s.closeErr = err
	})
	return s.closeErr
}

// Reads.

// openSnap publishes a new shared read transaction of the data file.
func (s *Store) openSnap() error {
	tx, err := s.db.Begin(false)
	if err != nil {
		return fmt.Errorf("mvcc: read the data file: %w", err)
	}
	s.snap.Store(&snapshot{tx: tx, key: tx.Bucket(bucketKey)})
	return nil
}

// retireSnap closes the current read transaction once its readers are done,
// and keeps new readers waiting until unblock, which publishes the next one
// (or, on a closed store, none).
func (s *Store) retireSnap() (unblock func(next bool)) {
	old := s.snap.Load()
	old.mu.Lock()
	old.tx.Rollback()
	old.closed = true
	return func(next bool) {
		if next {
			if err := s.openSnap(); err != nil {
				s.snap.Store(&snapshot{closed: true, err: err})
			}
		} else {
			s.snap.Store(&snapshot{closed: true, err: ErrClosed})
		}
		old.mu.Unlock()
	}
}

func (s *Store) snapClose() {
	if s.snap.Load() != nil {
		s.retireSnap()(false)
	}
}

// acquire returns the current shared read transaction, read-locked.
func (s *Store) acquire() (*snapshot, error) {
	for {
		sn := s.snap.Load()
		if sn.err != nil {
			return nil, sn.err
		}
		sn.mu.RLock()
		if !sn.closed {
			return sn, nil
		}
		sn.mu.RUnlock()
	}
}

func (sn *snapshot) release() { sn.mu.RUnlock() }

// reader reads records as of a view.
type reader struct {
	v *view
	b *bolt.Bucket
}

// memGet finds the sealed record r in mem (ascending).
func memGet(mem []memRecord, r revision) []byte {
	i := sort.Search(len(mem), func(i int) bool {
		m := mem[i].rev
		return m.main > r.main || m.main == r.main && m.sub >= r.sub
	})
	if i < len(mem) && mem[i].rev == r {
		return mem[i].val
	}
	return nil
}

func (rd *reader) get(r revision, keyOnly bool) (record, error) {
	var val []byte
	if r.main > rd.v.ckptRev {
		val = memGet(rd.v.mem, r)
	} else {
		val = rd.b.Get(revKey(r))
	}
	if val == nil {
		return record{}, fmt.Errorf("%w: record %d.%d is missing", ErrCorrupt, r.main, r.sub)
	}
	return openRecord(r, val, keyOnly)
}

// errWrongView makes a reader start over: a compaction came into force
// between loading the view and taking the index lock.
var errWrongView = errors.New("view changed")

// read runs fn with a reader of the current view and the index read-locked
// (fn may release it early by calling unlock). Readers share the data
// file's read transaction; none opens its own.
func (s *Store) read(fn func(rd *reader, unlock func()) error) error {
	for {
		v := s.view.Load()
		sn, err := s.acquire()
		if err != nil {
			return err
		}
		// The read transaction was published before v was (a checkpoint
		// publishes its transaction, then the view that reads from it), so
		// it holds every record up to v.ckptRev, and every record a read at
		// or above v's compact revision needs — unless a later compaction
		// (which deletes records only after it is in force) was already in
		// force when it was published: check under the index lock, which
		// such a compaction takes.
		s.idx.mu.RLock()
		locked := true
		unlock := func() {
			if locked {
				locked = false
				s.idx.mu.RUnlock()
			}
		}
		if s.view.Load().compactRev != v.compactRev {
			err = errWrongView
		} else {
			err = fn(&reader{v: v, b: sn.key}, unlock)
		}
		unlock()
		sn.release()
		if err != errWrongView {
			return err
		}
	}
}

// Range reads the keys of a range at a revision (see [RangeRequest]).
func (s *Store) Range(ctx context.Context, req RangeRequest) (RangeResponse, error) {
	if req.Key == "" {
		return RangeResponse{}, ErrEmptyKey
	}
	if err := ctx.Err(); err != nil {
		return RangeResponse{}, err
	}
	var out RangeResponse
	err := s.read(func(rd *reader, unlock func()) error {
		v := rd.v
		rev := req.Revision
		if rev > v.rev {
			return ErrFutureRev
		}
		if rev <= 0 {
			rev = v.rev
		}
		if rev < v.compactRev {
			return ErrCompacted
		}
		refs, count, more := s.idx.rangeAt(req, rev)
		unlock()
		kvs, err := rd.readKVs(refs, req.KeysOnly)
		if err != nil {
			return err
		}
		out = RangeResponse{Revision: v.rev, KVs: kvs, More: more, Count: count}
		return nil
	})
	if err != nil {
		return RangeResponse{}, err
	}
	return out, nil
}

// readKVs reads the key-values of the given records.
func (rd *reader) readKVs(refs []revision, keysOnly bool) ([]KeyValue, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	kvs := make([]KeyValue, 0, len(refs))
	for _, r := range refs {
		rec, err := rd.get(r, keysOnly)
		if err != nil {
			return nil, err
		}
		if keysOnly {
			rec.kv.Lease = 0 // as etcd's keys-only range (see KeyValue.Lease)
		}
		kvs = append(kvs, rec.kv)
	}
	return kvs, nil
}

// Events returns the events of revisions from through to, in revision and
// operation order, stopping early at the end of the first revision that
// brings their number to maxEvents or more (maxEvents ≤ 0: no limit). It
// returns the last revision it covered completely: to, or the revision it
// stopped after. With withPrev, every event whose key existed at
// ModRevision-1 carries that state as PrevKV, unless ModRevision-1 is below
// the compact revision.
//
// It fails with ErrCompacted when from is below the compact revision and
// with ErrFutureRev when to is above the current revision. Events never
// splits a revision.
func (s *Store) Events(from, to int64, maxEvents int, withPrev bool) (evs []Event, last int64, err error) {
	err = s.read(func(rd *reader, unlock func()) error {
		unlock()
		v := rd.v
		if from < v.compactRev {
			return ErrCompacted
		}
		if to > v.rev {
			return ErrFutureRev
		}
		evs, last = nil, to
		if from > to {
			return nil
		}
		// add appends the event of one record; false stops the walk.
		add := func(r revision, val []byte) (bool, error) {
			if r.main > to {
				return false, nil
			}
			if maxEvents > 0 && len(evs) >= maxEvents && r.main != evs[len(evs)-1].KV.ModRevision {
				last = evs[len(evs)-1].KV.ModRevision
				return false, nil
			}
			rec, err := openRecord(r, val, false)
			if err != nil {
				return false, err
			}
			e := rec.event()
			if withPrev && rec.hasPrev && r.main-1 >= v.compactRev {
				p, err := rd.get(rec.prev, false)
				if err != nil {
					return false, err
				}
				e.PrevKV = &p.kv
			}
			evs = append(evs, e)
			return true, nil
		}
		if from <= v.ckptRev {
			c := rd.b.Cursor()
			for k, val := c.Seek(revKey(revision{main: max(from, 0)})); k != nil; k, val = c.Next() {
				r, err := parseRevKey(k)
				if err != nil {
					return err
				}
				if r.main > v.ckptRev {
					break
				}
				if more, err := add(r, val); err != nil || !more {
					return err
				}
			}
		}
		i := sort.Search(len(v.mem), func(i int) bool { return v.mem[i].rev.main >= from })
		for ; i < len(v.mem); i++ {
			if more, err := add(v.mem[i].rev, v.mem[i].val); err != nil || !more {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return evs, last, nil
}
