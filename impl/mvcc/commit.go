package mvcc

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// commitLoop is the commit goroutine: it takes every waiting request,
// applies them in order in memory, appends the batch to the log as one
// frame (one write, one fdatasync), publishes the result, and answers the
// writers.
//
// It commits only while a group commit is in progress: a writer that
// arrives while no batch is being committed commits its own request in its
// own goroutine (see submit) — two goroutine hand-offs fewer per write,
// which is most of what a lone writer waits for besides its fdatasync — and
// hands the commit goroutine whatever queued up meanwhile. Either way one
// committer at a time (s.committing) applies the batches, in arrival order.
func (s *Store) commitLoop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for !s.handoff && (s.committing || len(s.queue) == 0) {
			if s.closing && !s.committing && len(s.queue) == 0 {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		s.handoff, s.committing = false, true
		s.mu.Unlock()
		s.commitQueued()
	}
}

// commitQueued commits the queued requests, batch after batch, until the
// queue is empty; the caller is the committer (s.committing), and is no
// longer once it returns.
func (s *Store) commitQueued() {
	s.mu.Lock()
	for len(s.queue) > 0 {
		n := min(len(s.queue), s.opts.MaxBatch)
		batch := s.queue[:n:n]
		s.queue = s.queue[n:]
		s.mu.Unlock()
		s.waitRoom()
		s.commit(batch)
		s.mu.Lock()
	}
	s.committing = false
	closing := s.closing
	s.mu.Unlock()
	if closing {
		s.kick() // Close waits for the commit goroutine, which waits for this
	}
}

// kick wakes the commit goroutine.
func (s *Store) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// memLimit is the most bytes of records the store keeps in memory before
// its writers wait for a checkpoint: twice CheckpointBytes (0: no limit,
// when checkpoints by size are off).
func (s *Store) memLimit() int64 {
	if s.opts.CheckpointBytes <= 0 {
		return 0
	}
	return 2 * s.opts.CheckpointBytes
}

// waitRoom is the back-pressure on writers: while the records not yet
// checkpointed reach memLimit, the committer waits (and with it every
// writer) for a checkpoint to write some into the data file, instead of
// letting memory grow with whatever the writers send faster than the data
// file takes it. Checkpoints go in parts (see checkpointPart), so the wait
// lasts one part. It does not wait when no checkpoint can make room: the
// disk is full (the NOSPACE alarm stops checkpoints), the last checkpoint
// failed, or the store is closing — memory then grows as before, and the
// log keeps everything.
func (s *Store) waitRoom() {
	limit := s.memLimit()
	if limit <= 0 {
		return
	}
	s.memMu.Lock()
	defer s.memMu.Unlock()
	waited := false
	for s.memBytes >= limit && !s.memNoWait && !s.ckptFailing && !s.noSpace.Load() {
		if !waited {
			waited = true
			s.stats.memWaits.Add(1)
		}
		s.ckpt.poke()
		s.memRoom.Wait()
	}
}

// request is one write waiting for the committer.
type request struct {
	ctx  context.Context
	put  *PutRequest
	del  *DeleteRequest
	txn  *TxnRequest
	comp *int64
	// lease is a grant or a revoke (lease.go).
	lease *leaseRequest

	resp any
	err  error
	done chan struct{}
}

func (r *request) finish(resp any, err error) {
	r.resp, r.err = resp, err
	close(r.done)
}

// submit hands r to the committer and waits for its answer. If ctx ends
// first it returns ctx.Err(); the request may or may not be applied.
func (s *Store) submit(r *request) (any, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	r.done = make(chan struct{})
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return nil, ErrClosed
	case s.failed != nil:
		err := s.failed
		s.mu.Unlock()
		return nil, err
	}
	if !s.committing {
		// No group commit in progress (so nothing is queued): commit r
		// here, in the writer's goroutine.
		s.committing = true
		s.mu.Unlock()
		s.waitRoom()
		s.commit([]*request{r})
		s.stats.ownCommits.Add(1)
		s.mu.Lock()
		if len(s.queue) > 0 {
			// Writers came meanwhile: the commit goroutine commits them,
			// while this one answers its writer.
			s.handoff = true
			s.mu.Unlock()
			s.kick()
		} else {
			s.committing = false
			closing := s.closing
			s.mu.Unlock()
			if closing {
				s.kick() // Close waits for the commit goroutine, which waits for this
			}
		}
		return r.resp, r.err
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	s.kick()
	select {
	case <-r.done:
		return r.resp, r.err
	case <-r.ctx.Done():
		return nil, r.ctx.Err()
	}
}

// Put writes a key. It returns once the write is durable.
func (s *Store) Put(ctx context.Context, req PutRequest) (PutResponse, error) {
	if req.Key == "" {
		return PutResponse{}, ErrEmptyKey
	}
	resp, err := s.submit(&request{ctx: ctx, put: &req})
	if err != nil {
		return PutResponse{}, err
	}
	return resp.(PutResponse), nil
}

// Delete removes the live keys of a range. It returns once the deletion is
// durable; a deletion that removes nothing writes nothing.
func (s *Store) Delete(ctx context.Context, req DeleteRequest) (DeleteResponse, error) {
	if req.Key == "" {
		return DeleteResponse{}, ErrEmptyKey
	}
	resp, err := s.submit(&request{ctx: ctx, del: &req})
	if err != nil {
		return DeleteResponse{}, err
	}
	return resp.(DeleteResponse), nil
}

// Txn runs a transaction (see [TxnRequest]). It returns once its writes, if
// any, are durable. A transaction that fails validation changes nothing.
func (s *Store) Txn(ctx context.Context, req TxnRequest) (TxnResponse, error) {
	if err := checkTxn(&req); err != nil {
		return TxnResponse{}, err
	}
	resp, err := s.submit(&request{ctx: ctx, txn: &req})
	if err != nil {
		return TxnResponse{}, err
	}
	return resp.(TxnResponse), nil
}

// Compact makes every revision below rev unreadable. It fails with
// ErrCompacted when rev is at or below the compact revision and with
// ErrFutureRev when rev is above the current revision. It returns once the
// new compact revision is durable and in force; the unreachable records are
// deleted in the background.
func (s *Store) Compact(ctx context.Context, rev int64) (CompactResponse, error) {
	resp, err := s.submit(&request{ctx: ctx, comp: &rev})
	if err != nil {
		return CompactResponse{}, err
	}
	return resp.(CompactResponse), nil
}

// batch is the state of one group commit.
type batch struct {
	s       *Store
	recs    []memRecord // the records written, in order
	commits []Commit
	added   []string // keys whose index history grew, for the undo on failure
	compact bool     // a compaction was applied
}

func (s *Store) commit(reqs []*request) {
	prevRev, prevCompact := s.crev, s.ccompact
	bt := &batch{s: s}
	resps := make([]any, len(reqs))
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		if r.ctx.Err() != nil {
			// The writer gave up and was told so: the outcome of its request
			// is unknown to it, and not applying it is one of the outcomes.
			errs[i] = r.ctx.Err()
			continue
		}
		resps[i], errs[i] = bt.apply(r)
		if errs[i] != nil && !isRequestError(errs[i]) {
			s.undo(bt, prevRev, prevCompact)
			s.fail(reqs, errs[i])
			return
		}
	}
	if len(bt.commits) == 0 && !bt.compact {
		s.answer(reqs, resps, errs)
		return
	}
	f := frame{prev: prevRev, rev: s.crev, compact: -1, recs: bt.recs}
	if bt.compact {
		f.compact = s.ccompact
	}
	buf := appendFrame(nil, &f)
	s.walMu.Lock()
	start := time.Now()
	err := s.seg.append(buf)
	if err == nil {
		s.logRev, s.logCompact = s.crev, s.ccompact
		// The frame is durable: a checkpoint may write it from now on. It
		// is known to memory under the log's lock, so that a checkpoint
		// that rotates the log after it finds it (see checkpointPart).
		mf := memFrame{rev: s.crev, compact: s.ccompact, recs: len(bt.recs)}
		for _, r := range bt.recs {
			mf.bytes += int64(len(r.val) + revKeyLen)
		}
		s.memMu.Lock()
		s.memFrames = append(s.memFrames, mf)
		s.memBytes += mf.bytes
		s.memMu.Unlock()
	}
	s.walMu.Unlock()
	if err != nil {
		s.undo(bt, prevRev, prevCompact)
		if le, ok := err.(*logError); ok && le.noSpace {
			s.raiseNoSpace(err)
			for i := range errs {
				if lr := reqs[i].lease; lr != nil && lr.grant != nil && errs[i] == nil {
					continue // durable in the lease table, whatever became of the log
				}
				// A revoke taken back here is already out of the lease
				// table: its keys are deleted by the next Open (lease.go).
				resps[i], errs[i] = nil, ErrNoSpace
			}
			s.answer(reqs, resps, errs)
			return
		}
		s.fail(reqs, err)
		return
	}
	s.stats.groupCommits.Add(1)
	if !s.opts.UnsafeNoFsync {
		s.stats.logSyncs.Add(1)
		if s.opts.OnLogSync != nil {
			s.opts.OnLogSync(time.Since(start))
		}
	}
	// Durable: publish. A compaction comes into force together with the
	// batch's revision, under the index lock (see Store.read).
	var keep map[revision]struct{}
	if bt.compact {
		s.idx.mu.Lock()
		keep = s.idx.compact(s.ccompact)
	}
	s.memMu.Lock()
	if s.memSince.IsZero() && len(s.memFrames) > 0 {
		s.memSince = time.Now()
	}
	s.publish()
	full := s.opts.CheckpointBytes > 0 && s.memBytes >= s.opts.CheckpointBytes
	s.memMu.Unlock()
	if bt.compact {
		s.idx.mu.Unlock()
		s.compactor.schedule(s.ccompact, keep)
	}
	if full {
		s.ckpt.poke()
	}
	s.lt.noteCommits(bt.commits)
	switch {
	case s.opts.OnCommits != nil && len(bt.commits) > 0:
		s.opts.OnCommits(bt.commits)
	case s.opts.OnCommit != nil:
		for _, c := range bt.commits {
			s.opts.OnCommit(c)
		}
	}
	s.answer(reqs, resps, errs)
}

func (s *Store) answer(reqs []*request, resps []any, errs []error) {
	for i, r := range reqs {
		r.finish(resps[i], errs[i])
	}
}

// undo forgets what a batch that did not become durable did: its index
// entries, its records, the revision.
func (s *Store) undo(bt *batch, rev, compact int64) {
	s.idx.mu.Lock()
	for i := len(bt.added) - 1; i >= 0; i-- {
		s.idx.unadd(bt.added[i])
	}
	s.idx.mu.Unlock()
	s.memMu.Lock()
	n := len(s.mem)
	for n > 0 && s.mem[n-1].rev.main > rev {
		n--
	}
	clear(s.mem[n:])
	s.mem = s.mem[:n]
	s.memMu.Unlock()
	s.crev, s.ccompact = rev, compact
}

// fail answers a batch that could not be made durable and stops the store
// from accepting writes: after a failed fsync the state of the log is not
// known (the store must be reopened, which replays what the log holds).
func (s *Store) fail(reqs []*request, err error) {
	err = fmt.Errorf("mvcc: commit failed, store is read-only until reopened: %w", err)
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.mu.Unlock()
	s.opts.Logger.Error("mvcc: the log failed; refusing writes until the store is reopened", "dir", s.dir, "err", err)
	for _, r := range reqs {
		r.finish(nil, err)
	}
}

// latest reads the committer's view of record r: from memory above the
// checkpoint (including the batch being applied), else from the data file.
func (s *Store) latest(r revision, keyOnly bool) (record, error) {
	s.memMu.Lock()
	if r.main > s.ckptRev {
		val := memGet(s.mem, r)
		s.memMu.Unlock()
		if val == nil {
			return record{}, fmt.Errorf("%w: record %d.%d is missing", ErrCorrupt, r.main, r.sub)
		}
		return openRecord(r, val, keyOnly)
	}
	s.memMu.Unlock()
	// The data file holds r (checkpoints only add records, and the ones a
	// compaction deletes are never read by the committer: it reads the
	// latest records, and ranges at or above the compact revision).
	sn, err := s.acquire()
	if err != nil {
		return record{}, err
	}
	defer sn.release()
	val := sn.key.Get(revKey(r))
	if val == nil {
		return record{}, fmt.Errorf("%w: record %d.%d is missing", ErrCorrupt, r.main, r.sub)
	}
	return openRecord(r, val, keyOnly)
}

func isRequestError(err error) bool {
	switch err {
	case ErrCompacted, ErrFutureRev, ErrEmptyKey, ErrDuplicateKey, ErrKeyNotFound, ErrInvalidRequest, ErrNoSpace,
		ErrLeaseNotFound, ErrLeaseExist, ErrLeaseTTLTooLarge:
		return true
	}
	_, ok := err.(*leaseFileError)
	return ok
}

// apply applies one request at the committer's logical state.
func (bt *batch) apply(r *request) (any, error) {
	s := bt.s
	if s.noSpace.Load() && (r.put != nil || r.txn != nil && txnPuts(r.txn) || r.lease != nil && r.lease.grant != nil) {
		return nil, ErrNoSpace // etcd's applierV3Capped (LeaseGrant too)
	}
	switch {
	case r.lease != nil:
		return bt.applyLease(r.lease)
	case r.put != nil:
		if err := s.checkLeases([]Op{{Put: r.put}}); err != nil {
			return nil, err
		}
		w := bt.begin()
		prev, err := w.put(*r.put)
		if err != nil {
			return nil, err
		}
		w.end()
		resp := PutResponse{Revision: s.crev}
		if r.put.PrevKV {
			resp.PrevKV = prev
		}
		return resp, nil
	case r.del != nil:
		w := bt.begin()
		resp, err := w.del(*r.del)
		if err != nil {
			return nil, err
		}
		w.end()
		resp.Revision = s.crev
		return resp, nil
	case r.txn != nil:
		return bt.txn(r.txn)
	default:
		rev := *r.comp
		if rev <= s.ccompact {
			return nil, ErrCompacted
		}
		if rev > s.crev {
			return nil, ErrFutureRev
		}
		s.ccompact = rev
		bt.compact = true
		return CompactResponse{Revision: s.crev}, nil
	}
}

// writer applies the writes of one request at one new revision.
type writer struct {
	bt     *batch
	rev    int64
	sub    int32
	events []Event
}

func (bt *batch) begin() *writer { return &writer{bt: bt, rev: bt.s.crev + 1} }

// end records the request's commit, if it wrote anything.
func (w *writer) end() {
	if len(w.events) == 0 {
		return
	}
	last := w.bt.recs[len(w.bt.recs)-1]
	setLast(revKey(last.rev), last.val)
	w.bt.s.crev = w.rev
	w.bt.commits = append(w.bt.commits, Commit{Revision: w.rev, Events: w.events})
}

// write stores one record and indexes it.
func (w *writer) write(rec *record) error {
	r := revision{main: w.rev, sub: w.sub}
	m := memRecord{rev: r, val: rec.seal(revKey(r))}
	w.bt.recs = append(w.bt.recs, m)
	s := w.bt.s
	s.memMu.Lock()
	s.mem = append(s.mem, m)
	s.memMu.Unlock()
	ix := w.bt.s.idx
	ix.mu.Lock()
	ix.add(rec.kv.Key, indexRev{main: r.main, sub: r.sub, tomb: rec.tomb})
	ix.mu.Unlock()
	w.bt.added = append(w.bt.added, rec.kv.Key)
	w.sub++
	return nil
}

// current returns key's live state, if any, and its record.
func (w *writer) current(key string) (*KeyValue, revision, error) {
	ir, ok := w.bt.s.idx.get(key).live()
	if !ok {
		return nil, revision{}, nil
	}
	rec, err := w.bt.s.latest(ir.rev(), false)
	if err != nil {
		return nil, revision{}, err
	}
	return &rec.kv, ir.rev(), nil
}

func (w *writer) put(p PutRequest) (*KeyValue, error) {
	prev, prevRev, err := w.current(p.Key)
	if err != nil {
		return nil, err
	}
	rec := record{kv: KeyValue{Key: p.Key, Value: p.Value, CreateRevision: w.rev, ModRevision: w.rev, Version: 1, Lease: p.Lease}}
	if prev != nil {
		rec.kv.CreateRevision, rec.kv.Version = prev.CreateRevision, prev.Version+1
		rec.hasPrev, rec.prev = true, prevRev
	}
	if err := w.write(&rec); err != nil {
		return nil, err
	}
	w.events = append(w.events, Event{Type: Put, KV: rec.kv, PrevKV: prev})
	return prev, nil
}

func (w *writer) del(d DeleteRequest) (DeleteResponse, error) {
	var resp DeleteResponse
	var victims []string
	w.bt.s.idx.ascend(d.Key, d.RangeEnd, func(ki *keyIndex) bool {
		if _, ok := ki.live(); ok {
			victims = append(victims, ki.key)
		}
		return true
	})
	for _, key := range victims {
		prev, prevRev, err := w.current(key)
		if err != nil {
			return resp, err
		}
		rec := record{kv: KeyValue{Key: key, ModRevision: w.rev}, tomb: true, hasPrev: true, prev: prevRev}
		if err := w.write(&rec); err != nil {
			return resp, err
		}
		w.events = append(w.events, Event{Type: Delete, KV: KeyValue{Key: key, ModRevision: w.rev}, PrevKV: prev})
		resp.Deleted++
		if d.PrevKV {
			resp.PrevKVs = append(resp.PrevKVs, *prev)
		}
	}
	return resp, nil
}

// rangeAt serves a range inside a transaction, seeing the writes made so far.
func (w *writer) rangeAt(r RangeRequest, rev int64) (RangeResponse, error) {
	if emptyRange(r.Key, r.RangeEnd) {
		return RangeResponse{}, nil
	}
	refs, count, more := w.bt.s.idx.rangeAt(r, rev)
	var kvs []KeyValue
	for _, ref := range refs {
		rec, err := w.bt.s.latest(ref, r.KeysOnly)
		if err != nil {
			return RangeResponse{}, err
		}
		if r.KeysOnly {
			rec.kv.Lease = 0 // as etcd's keys-only range (see KeyValue.Lease)
		}
		kvs = append(kvs, rec.kv)
	}
	return RangeResponse{KVs: kvs, More: more, Count: count}, nil
}

func (bt *batch) txn(t *TxnRequest) (any, error) {
	s := bt.s
	ok := true
	for _, c := range t.Compare {
		holds, err := bt.holds(c)
		if err != nil {
			return nil, err
		}
		if !holds {
			ok = false
			break
		}
	}
	ops := t.Failure
	if ok {
		ops = t.Success
	}
	// Ranges at an explicit revision and the leases of puts are checked
	// before anything is written, so that a failing op fails the whole
	// transaction; in op order, the first failing op deciding the error, as
	// etcd's checkTxn does (etcdserver/txn/txn.go, checkRange and
	// txn/put.go checkLease at v3.7.3).
	for i, op := range ops {
		if op.Put != nil {
			if err := s.checkLeases(ops[i : i+1]); err != nil {
				return nil, err
			}
		}
		if op.Range == nil || op.Range.Revision == 0 {
			continue
		}
		if op.Range.Revision > s.crev {
			return nil, ErrFutureRev
		}
		if op.Range.Revision < s.ccompact {
			return nil, ErrCompacted
		}
	}
	begin := s.crev
	w := bt.begin()
	resp := TxnResponse{Succeeded: ok, Responses: make([]OpResponse, 0, len(ops))}
	for _, op := range ops {
		// etcd's nested header: the new revision once something was written.
		hdr := begin
		if len(w.events) > 0 {
			hdr = w.rev
		}
		switch {
		case op.Range != nil:
			rev := op.Range.Revision
			if rev <= 0 {
				rev = w.rev // sees the writes made before it
			}
			r, err := w.rangeAt(*op.Range, rev)
			if err != nil {
				return nil, err
			}
			r.Revision = hdr
			resp.Responses = append(resp.Responses, OpResponse{Range: &r})
		case op.Put != nil:
			prev, err := w.put(*op.Put)
			if err != nil {
				return nil, err
			}
			p := PutResponse{Revision: w.rev}
			if op.Put.PrevKV {
				p.PrevKV = prev
			}
			resp.Responses = append(resp.Responses, OpResponse{Put: &p})
		default:
			d, err := w.del(*op.Delete)
			if err != nil {
				return nil, err
			}
			d.Revision = hdr
			if d.Deleted > 0 {
				d.Revision = w.rev
			}
			resp.Responses = append(resp.Responses, OpResponse{Delete: &d})
		}
	}
	w.end()
	resp.Revision = s.crev
	return resp, nil
}

// holds evaluates one guard against the committer's current state.
func (bt *batch) holds(c Compare) (bool, error) {
	var cur *KeyValue
	if ir, ok := bt.s.idx.get(c.Key).live(); ok {
		rec, err := bt.s.latest(ir.rev(), c.Target != TargetValue)
		if err != nil {
			return false, err
		}
		cur = &rec.kv
	}
	var cmp int
	switch c.Target {
	case TargetValue:
		if cur == nil {
			return false, nil
		}
		cmp = strings.Compare(cur.Value, c.Value)
	case TargetVersion, TargetCreateRevision, TargetModRevision:
		var have int64
		if cur != nil {
			switch c.Target {
			case TargetVersion:
				have = cur.Version
			case TargetCreateRevision:
				have = cur.CreateRevision
			default:
				have = cur.ModRevision
			}
		}
		switch {
		case have < c.Number:
			cmp = -1
		case have > c.Number:
			cmp = 1
		}
	default:
		return false, nil
	}
	switch c.Result {
	case CompareEqual:
		return cmp == 0, nil
	case CompareNotEqual:
		return cmp != 0, nil
	case CompareLess:
		return cmp < 0, nil
	case CompareGreater:
		return cmp > 0, nil
	}
	return false, nil
}

// checkTxn validates a transaction before it is queued: every op sets exactly
// one operation, no key is empty, and neither branch writes a key twice.
func checkTxn(t *TxnRequest) error {
	for _, c := range t.Compare {
		if c.Key == "" {
			return ErrEmptyKey
		}
	}
	for _, ops := range [][]Op{t.Success, t.Failure} {
		for _, op := range ops {
			n := 0
			for _, set := range []bool{op.Range != nil, op.Put != nil, op.Delete != nil} {
				if set {
					n++
				}
			}
			switch n {
			case 0:
				return ErrKeyNotFound
			case 1:
			default:
				return ErrInvalidRequest
			}
			if (op.Range != nil && op.Range.Key == "") || (op.Put != nil && op.Put.Key == "") ||
				(op.Delete != nil && op.Delete.Key == "") {
				return ErrEmptyKey
			}
		}
	}
	for _, ops := range [][]Op{t.Success, t.Failure} {
		if err := checkDuplicates(ops); err != nil {
			return err
		}
	}
	return nil
}

// checkDuplicates rejects a branch that puts one key twice or puts a key
// that one of its deletes covers, whatever their order. Unlike etcd up to
// 3.7 (etcd#22445) it also sees the overlap with a from-key delete
// (range end "\x00"), as docs/SPEC.md §2.5 states.
func checkDuplicates(ops []Op) error {
	puts := make(map[string]bool)
	for _, op := range ops {
		if op.Put == nil {
			continue
		}
		if puts[op.Put.Key] {
			return ErrDuplicateKey
		}
		puts[op.Put.Key] = true
		for _, d := range ops {
			if d.Delete != nil && InRange(d.Delete.Key, d.Delete.RangeEnd, op.Put.Key) {
				return ErrDuplicateKey
			}
		}
	}
	return nil
}

// txnPuts reports whether either branch of t puts (etcd's quota cost of a
// transaction is that of its costlier branch).
func txnPuts(t *TxnRequest) bool {
	for _, ops := range [][]Op{t.Success, t.Failure} {
		for _, op := range ops {
			if op.Put != nil {
				return true
			}
		}
	}
	return false
}
