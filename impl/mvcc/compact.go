package mvcc

import (
	"bytes"
	"errors"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactor deletes, in the background, the records a compaction made
// unreachable, and then records the compaction as finished.
//
// It works on the data file only, after a checkpoint has brought every
// record at or below the compaction into it; the log never holds a record
// at or below a compaction that the data file does not (the records the
// log replays are above the data file's revision).
//
// Crash safety. The compaction revision c is durable ("scheduled") before
// Compact returns, and the index already answers as compacted. The
// compactor then walks the records at or below c in revision order and
// deletes, in transactions of CompactionBatchLimit records, every one that
// is not in the keep set (the state of each key at c; see index.compact).
// Because the walk goes in revision order, the older records of a key are
// gone before its tombstone is, so after a crash at any point the records
// left still say the same thing about every key at c: reopening rebuilds the
// same index, recomputes the same keep set and finishes the walk
// (etcd#19179). The tombstone exactly at c is in the keep set, and the
// revision is stored with every commit, so the revision after a restart is
// never lower than before (etcd#17780).
type compactor struct {
	s       *Store
	mu      sync.Mutex
	rev     int64 // the compaction to run, -1 if none
	keep    map[revision]struct{}
	wake    chan struct{}
	quit    chan struct{}
	stopped chan struct{}
}

func (c *compactor) start(s *Store, keep map[revision]struct{}) {
	c.s = s
	c.rev = -1
	c.wake = make(chan struct{}, 1)
	c.quit = make(chan struct{})
	c.stopped = make(chan struct{})
	if keep != nil {
		c.rev, c.keep = s.ccompact, keep
		c.wake <- struct{}{}
	}
	go c.loop()
}

// schedule asks for a compaction at rev, superseding any not yet finished:
// the keep set of a later compaction never holds a record an earlier one
// would delete.
func (c *compactor) schedule(rev int64, keep map[revision]struct{}) {
	c.mu.Lock()
	c.rev, c.keep = rev, keep
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compactor) stop() {
	close(c.quit)
	<-c.stopped
}

// poke retries a compaction that failed (the disk was full).
func (c *compactor) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compactor) loop() {
	defer close(c.stopped)
	for {
		select {
		case <-c.quit:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		rev, keep := c.rev, c.keep
		c.mu.Unlock()
		if rev < 0 || c.s.noSpace.Load() {
			continue // DisarmAlarm pokes
		}
		if c.run(rev, keep) {
			c.mu.Lock()
			if c.rev == rev {
				c.rev, c.keep = -1, nil
			}
			c.mu.Unlock()
		}
		// Otherwise it stays scheduled: a poke retries it.
	}
}

// run deletes the records at or below rev that keep does not hold, batch by
// batch, then records rev as finished. It returns early when the store
// closes or a later compaction is scheduled (which finishes the work), and
// false when a transaction failed (the disk was full): the compaction stays
// scheduled.
func (c *compactor) run(rev int64, keep map[revision]struct{}) bool {
	s := c.s
	// The data file's state must record the compaction before any record
	// goes: the data file on its own then always says which records may be
	// missing (those at or below its scheduled compaction).
	s.memMu.Lock()
	covered := s.ckptRev >= rev && s.ckptCompact >= rev
	s.memMu.Unlock()
	if !covered {
		if err := s.checkpoint(); err != nil {
			s.opts.Logger.Warn("mvcc: compaction waits for a checkpoint", "dir", s.dir, "compaction", rev, "err", err)
			return errors.Is(err, ErrClosed)
		}
	}
	limit := c.s.opts.CompactionBatchLimit
	end := revKey(revision{main: rev + 1}) // first key above rev
	var from []byte
	for batch := 1; ; batch++ {
		var next []byte
		done := false
		err := c.s.boltUpdate(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketKey)
			cur := b.Cursor()
			var dead [][]byte
			k, _ := cur.First()
			if from != nil {
				k, _ = cur.Seek(from)
			}
			for ; k != nil && bytes.Compare(k, end) < 0; k, _ = cur.Next() {
				if len(dead) == limit {
					next = append([]byte(nil), k...)
					break
				}
				r, err := parseRevKey(k)
				if err != nil {
					return err
				}
				if _, ok := keep[r]; !ok {
					dead = append(dead, append([]byte(nil), k...))
				}
			}
			for _, k := range dead {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			if next == nil {
				done = true
				return tx.Bucket(bucketMeta).Put(metaFinished, sealBytes(metaFinished, encodeFinished(rev)))
			}
			return nil
		})
		if err != nil {
			if isNoSpace(err) {
				s.raiseNoSpace(err)
			}
			s.opts.Logger.Warn("mvcc: compaction batch failed; it is retried", "dir", s.dir, "compaction", rev, "err", err)
			return false
		}
		s.opts.point("compaction: batch committed")
		if h := c.s.opts.compactionHook; h != nil {
			h(rev, batch, done)
		}
		if done {
			return true
		}
		from = next
		if d := c.s.opts.CompactionSleepInterval; d > 0 {
			t := time.NewTimer(d)
			select {
			case <-c.quit:
				t.Stop()
				return true
			case <-t.C:
			}
		}
		select {
		case <-c.quit:
			return true
		default:
		}
		c.mu.Lock()
		superseded := c.rev != rev
		c.mu.Unlock()
		if superseded {
			return true
		}
	}
}
