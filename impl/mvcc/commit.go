package mvcc

import (
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// commitLoop is the commit goroutine: it takes every waiting request,
// applies them in order in one transaction of the data file, commits it
// (fsync), publishes the result, and answers the writers.
func (s *Store) commitLoop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closing {
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		if s.closing && len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		n := min(len(s.queue), s.opts.MaxBatch)
		batch := s.queue[:n:n]
		s.queue = s.queue[n:]
		s.mu.Unlock()
		s.commit(batch)
	}
}

// batch is the state of one group commit.
type batch struct {
	s       *Store
	b       *bolt.Bucket
	commits []Commit
	added   []string // keys whose index history grew, for the undo on failure
	compact bool     // a compaction was applied
}

func (s *Store) commit(reqs []*request) {
	tx, err := s.db.Begin(true)
	if err != nil {
		s.fail(reqs, err)
		return
	}
	bt := &batch{s: s, b: tx.Bucket(bucketKey)}
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
			tx.Rollback()
			s.undo(bt)
			s.fail(reqs, errs[i])
			return
		}
	}
	if len(bt.commits) == 0 && !bt.compact {
		tx.Rollback()
		s.answer(reqs, resps, errs)
		return
	}
	mb := tx.Bucket(bucketMeta)
	err = mb.Put(metaRev, i64(s.crev))
	if err == nil && bt.compact {
		err = mb.Put(metaScheduled, i64(s.ccompact))
	}
	if err == nil {
		err = tx.Commit()
	} else {
		tx.Rollback()
	}
	if err != nil {
		s.undo(bt)
		s.fail(reqs, err)
		return
	}
	s.commits.Add(1)
	// Durable: publish. A compaction comes into force together with the
	// batch's revision, under the index lock (see Store.read).
	if bt.compact {
		s.idx.mu.Lock()
		keep := s.idx.compact(s.ccompact)
		s.view.Store(&view{rev: s.crev, compactRev: s.ccompact})
		s.idx.mu.Unlock()
		s.compactor.schedule(s.ccompact, keep)
	} else {
		s.view.Store(&view{rev: s.crev, compactRev: s.ccompact})
	}
	if s.opts.OnCommit != nil {
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

// undo forgets the index entries of a batch that did not commit.
func (s *Store) undo(bt *batch) {
	s.idx.mu.Lock()
	for i := len(bt.added) - 1; i >= 0; i-- {
		s.idx.unadd(bt.added[i])
	}
	s.idx.mu.Unlock()
	v := s.view.Load()
	s.crev, s.ccompact = v.rev, v.compactRev
}

// fail answers a batch that could not be made durable and stops the store
// from accepting writes: after a failed fsync the state of the file is not
// known (the store must be reopened).
func (s *Store) fail(reqs []*request, err error) {
	err = fmt.Errorf("mvcc: commit failed, store is read-only until reopened: %w", err)
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.mu.Unlock()
	for _, r := range reqs {
		r.finish(nil, err)
	}
}

func isRequestError(err error) bool {
	switch err {
	case ErrCompacted, ErrFutureRev, ErrEmptyKey, ErrDuplicateKey, ErrKeyNotFound, ErrInvalidRequest:
		return true
	}
	return false
}

// apply applies one request at the committer's logical state.
func (bt *batch) apply(r *request) (any, error) {
	s := bt.s
	switch {
	case r.put != nil:
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
	w.bt.s.crev = w.rev
	w.bt.commits = append(w.bt.commits, Commit{Revision: w.rev, Events: w.events})
}

// write stores one record and indexes it.
func (w *writer) write(rec *record) error {
	r := revision{main: w.rev, sub: w.sub}
	// bbolt keeps the key and value slices until the transaction ends: each
	// record needs its own.
	if err := w.bt.b.Put(revKey(r), rec.encode(nil)); err != nil {
		return err
	}
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
	rec, err := getRecord(w.bt.b, ir.rev(), false)
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
	rec := record{kv: KeyValue{Key: p.Key, Value: p.Value, CreateRevision: w.rev, ModRevision: w.rev, Version: 1}}
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
	kvs, err := readKVs(w.bt.b, refs, r.KeysOnly)
	if err != nil {
		return RangeResponse{}, err
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
	// Ranges at an explicit revision are checked before anything is written,
	// so that a failing range fails the whole transaction (etcd's checkRange).
	for _, op := range ops {
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
		rec, err := getRecord(bt.b, ir.rev(), c.Target != TargetValue)
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
