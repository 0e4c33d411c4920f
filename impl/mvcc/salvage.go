package mvcc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RecoverReport says what [Recover] kept and what it could not.
type RecoverReport struct {
	Dir string
	// MovedTo is the directory the damaged files were moved into, kept for
	// inspection (DIR/damaged-<UTC time>); "" if nothing was moved.
	MovedTo string
	// Revision and CompactRevision are those of the recovered store.
	Revision, CompactRevision int64
	// Records is the number of records kept; FromDataFile and FromLog say
	// where they came from (a record in both counts once, in FromDataFile).
	Records, FromDataFile, FromLog int
	// Lost describes, in words, what could not be recovered: revisions
	// with records missing, records at or below the compact revision on
	// damaged pages.
	Lost []string
}

func (r *RecoverReport) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s: recovered %d records (%d from the data file, %d from the log): revision %d, compact revision %d\n",
		r.Dir, r.Records, r.FromDataFile, r.FromLog, r.Revision, r.CompactRevision)
	if r.MovedTo != "" {
		fmt.Fprintf(&b, "the damaged files were moved to %s\n", r.MovedTo)
	}
	if len(r.Lost) == 0 {
		b.WriteString("nothing that was found acknowledged is missing\n")
	}
	for _, l := range r.Lost {
		fmt.Fprintf(&b, "lost: %s\n", l)
	}
	return b.String()
}

// Recover rebuilds the store in dir from whatever in it still verifies, for
// a directory Open refuses as damaged. It reads every page of the data file
// (not only the reachable ones) and every frame of the log, keeps each record
// whose checksum verifies, moves the damaged files into dir/damaged-<UTC
// time>, and writes a new store from what it kept. It returns what it kept
// and what is lost.
//
// What it keeps: every record above the highest compaction the data file
// may have applied (as its state records, or a log segment's header),
// wherever it is — records there are never deleted, so any copy of one is
// good; at or below it, only the records of the data file's own tree (older
// copies, in pages a later transaction freed, may be versions a compaction
// deleted). If revisions above the compaction have records
// missing, the recovered store is compacted at the last of them, so that it
// never serves history with holes; the keys those revisions changed may
// hold a stale value, and the report names the revisions. A store that
// Check finds healthy is left alone.
func Recover(dir string) (*RecoverReport, error) {
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
	if len(in.damage) == 0 {
		return nil, fmt.Errorf("mvcc: %s is not damaged (revision %d): nothing to recover", dir, in.rev)
	}
	sv, rep, err := salvageDir(dir, names)
	if err != nil {
		return nil, err
	}

	// Move the damaged files aside, then write the new store.
	moved := filepath.Join(dir, "damaged-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(moved, 0o755); err != nil {
		return nil, fmt.Errorf("mvcc: recover: %w", err)
	}
	leasesDamaged := false
	for _, d := range in.damage {
		leasesDamaged = leasesDamaged || d.File == filepath.Join(dir, leaseFileName)
	}
	if leasesDamaged {
		rep.Lost = append(rep.Lost, "the lease table (leases) is damaged: every lease is lost, and the keys attached to one are deleted when the store is next opened")
	}
	for _, n := range names {
		if _, isSeg := parseSegmentName(n); isSeg || n == dataFileName || (n == leaseFileName && leasesDamaged) {
			if err := os.Rename(filepath.Join(dir, n), filepath.Join(moved, n)); err != nil {
				return nil, fmt.Errorf("mvcc: recover: move %s aside: %w", n, err)
			}
		}
	}
	rep.MovedTo = moved
	if err := sv.write(dir, rep); err != nil {
		return nil, fmt.Errorf("mvcc: recover: the damaged files are in %s; writing the new store failed: %w", moved, err)
	}
	return rep, nil
}

// salvageDir collects what verifies in dir and decides what a recovered
// store would hold, changing nothing.
func salvageDir(dir string, names []string) (*salvage, *RecoverReport, error) {
	sv := &salvage{state: storeState{rev: 1, sched: -1}, logCompact: -1, logBaseCompact: -1,
		tree: map[revision][]byte{}, other: map[revision][]byte{}, log: map[revision][]byte{}}
	if err := sv.dataFile(filepath.Join(dir, dataFileName)); err != nil {
		return nil, nil, err
	}
	for _, seq := range listSegments(names) {
		p := filepath.Join(dir, segmentName(seq))
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("mvcc: recover: read %s: %w", p, err)
		}
		if err := sv.logSegment(p, seq, data); err != nil {
			return nil, nil, err
		}
	}
	return sv, sv.assemble(dir), nil
}

// salvage collects what verifies.
type salvage struct {
	state      storeState // the highest of every state record that verifies
	hasState   bool
	storeID    uint64
	tree       map[revision][]byte // records of the data file's current tree
	other      map[revision][]byte // records found elsewhere in the data file
	log        map[revision][]byte // records of the log
	logCompact int64               // the highest compaction a frame scheduled
	logRev     int64
	// logBaseCompact: the highest compaction a segment header says the
	// data file's state held; logHeader: some header verified.
	logBaseCompact int64
	logHeader      bool
	damaged        []string
	recs           []memRecord
	out            salvaged
}

func (sv *salvage) noteState(st storeState) {
	if !sv.hasState || st.rev > sv.state.rev {
		sv.storeID = st.storeID
	}
	if st.rev > sv.state.rev {
		sv.state.rev = st.rev
	}
	sv.state.sched = max(sv.state.sched, st.sched)
	sv.hasState = true
}

// dataFile collects the records of the data file: those of the tree the
// usable meta page roots, then those on every other page that reads as a
// leaf.
func (sv *salvage) dataFile(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mvcc: recover: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	info := checkBolt(f, fi.Size(), path)
	ps := info.pageSize
	if ps == 0 {
		ps = int64(os.Getpagesize())
	}
	w := &salvageWalk{r: f, ps: ps, npages: uint64(fi.Size() / ps), seen: map[uint64]bool{}, sv: sv}
	if info.metaUsed >= 0 {
		w.root(info.meta.root, true)
	}
	for id := uint64(2); id < w.npages; id++ {
		if !w.seen[id] {
			w.orphan(id)
		}
	}
	return nil
}

type salvageWalk struct {
	r      io.ReaderAt
	ps     int64
	npages uint64
	seen   map[uint64]bool
	sv     *salvage
}

// page reads page id if it is a branch or leaf page that names itself.
func (w *salvageWalk) page(id uint64) ([]byte, uint16, bool) {
	if id < 2 || id >= w.npages || w.seen[id] {
		return nil, 0, false
	}
	hdr := make([]byte, w.ps)
	if _, err := w.r.ReadAt(hdr, int64(id)*w.ps); err != nil {
		return nil, 0, false
	}
	ne := binary.NativeEndian
	pid, flags, overflow := ne.Uint64(hdr[0:]), ne.Uint16(hdr[8:]), uint64(ne.Uint32(hdr[12:]))
	if pid != id || (flags != bBranchFlag && flags != bLeafFlag) || id+overflow >= w.npages {
		return nil, 0, false
	}
	buf := hdr
	if overflow > 0 {
		buf = make([]byte, int64(overflow+1)*w.ps)
		if _, err := w.r.ReadAt(buf, int64(id)*w.ps); err != nil {
			return nil, 0, false
		}
	}
	for i := uint64(0); i <= overflow; i++ {
		w.seen[id+i] = true
	}
	return buf, flags, true
}

// root walks the top-level bucket tree.
func (w *salvageWalk) root(id uint64, tree bool) {
	w.walk(id, func(el element) {
		if el.flags&bBucketFlag == 0 || len(el.value) < bBucketHeader {
			return
		}
		name := string(el.key)
		w.bucket(el.value, func(el element) { w.record(name, el, tree) })
	})
}

func (w *salvageWalk) walk(id uint64, leaf func(element)) {
	buf, flags, ok := w.page(id)
	if !ok {
		if id >= 2 && id < w.npages && !w.seen[id] {
			w.sv.damaged = append(w.sv.damaged, fmt.Sprintf("page %d", id))
		}
		return
	}
	els, bad := elements(buf, flags == bLeafFlag, false)
	if bad != "" {
		w.sv.damaged = append(w.sv.damaged, fmt.Sprintf("page %d", id))
		return
	}
	for _, el := range els {
		if flags == bLeafFlag {
			leaf(el)
		} else {
			w.walk(el.pgid, leaf)
		}
	}
}

func (w *salvageWalk) bucket(v []byte, leaf func(element)) {
	root := binary.NativeEndian.Uint64(v[0:])
	if root != 0 {
		w.walk(root, leaf)
		return
	}
	if els, bad := elements(v[bBucketHeader:], true, true); bad == "" {
		for _, el := range els {
			leaf(el)
		}
	}
}

// record keeps one element of bucket "key" or "meta" if it verifies.
func (w *salvageWalk) record(bucket string, el element, tree bool) {
	if el.flags != 0 {
		return
	}
	switch bucket {
	case "key":
		r, err := parseRevKey(el.key)
		if err != nil {
			return
		}
		if _, err := openRecord(r, el.value, true); err != nil {
			return
		}
		v := append([]byte(nil), el.value...)
		if tree {
			w.sv.tree[r] = v
		} else if _, ok := w.sv.tree[r]; !ok {
			w.sv.other[r] = v
		}
	case "meta":
		if body, ok := unseal(el.key, el.value); ok && bytes.Equal(el.key, metaState) {
			if st, err := decodeState(body); err == nil && st.format == formatVersion {
				w.sv.noteState(st)
			}
		}
	}
}

// orphan reads a page the tree did not reach: a leaf of an older
// transaction, or of a subtree under a damaged page.
func (w *salvageWalk) orphan(id uint64) {
	buf, flags, ok := w.page(id)
	if !ok || flags != bLeafFlag {
		return
	}
	els, bad := elements(buf, true, false)
	if bad != "" {
		return
	}
	for _, el := range els {
		switch {
		case el.flags&bBucketFlag != 0 && len(el.value) >= bBucketHeader && binary.NativeEndian.Uint64(el.value) == 0:
			name := string(el.key)
			w.bucket(el.value, func(el element) { w.record(name, el, false) })
		case len(el.key) == revKeyLen:
			w.record("key", el, false)
		default:
			w.record("meta", el, false)
		}
	}
}

// logSegment collects the frames of a segment that verify, before and after
// any damage. A segment of another store than the data file's is an error:
// Recover does not guess which of the two is wanted.
func (sv *salvage) logSegment(path string, seq uint64, data []byte) error {
	s := scanSegment(path, seq, data)
	if s.hdrBad == "" && (sv.hasState || sv.logHeader) && s.hdr.storeID != sv.storeID {
		return fmt.Errorf("%w: the data file and the log of %s belong to different stores (IDs %016x and %016x, in %s): move away the files of the one that is not wanted and recover again",
			ErrCorrupt, filepath.Dir(path), sv.storeID, s.hdr.storeID, filepath.Base(path))
	}
	frames := append(append([]scannedFrame(nil), s.frames...), s.after...)
	if s.hdrBad != "" {
		frames = resync(data, 0)
	}
	for _, f := range frames {
		for _, r := range f.recs {
			sv.log[r.rev] = append([]byte(nil), r.val...)
		}
		sv.logCompact = max(sv.logCompact, f.compact)
		sv.logRev = max(sv.logRev, f.rev)
	}
	if s.hdrBad == "" {
		if !sv.hasState {
			sv.storeID = s.hdr.storeID
		}
		sv.logBaseCompact = max(sv.logBaseCompact, s.hdr.baseCompact)
		sv.logRev = max(sv.logRev, s.hdr.base)
		sv.logHeader = true
	}
	return nil
}

// salvaged is the store Recover writes.
type salvaged struct {
	recs    []memRecord
	rev     int64
	compact int64
}

// assemble decides what the recovered store holds.
func (sv *salvage) assemble(dir string) *RecoverReport {
	rep := &RecoverReport{Dir: dir}
	// Records at or below cdel may have been deleted by a compaction (the
	// data file deletes records only at or below the compaction its state
	// records): only the current tree's copies of them are taken.
	cdel := max(sv.state.sched, sv.logBaseCompact)
	all := map[revision][]byte{}
	fromData := map[revision]bool{}
	for r, v := range sv.tree {
		all[r], fromData[r] = v, true
	}
	skipped := 0
	for r, v := range sv.other {
		if r.main > cdel {
			all[r], fromData[r] = v, true
		} else {
			skipped++
		}
	}
	for r, v := range sv.log {
		if _, ok := all[r]; !ok && r.main > cdel {
			all[r] = v
		}
	}
	c := max(cdel, sv.logCompact)
	rev := max(sv.state.rev, sv.logRev, 1)
	revs := make([]revision, 0, len(all))
	for r := range all {
		revs = append(revs, r)
		rev = max(rev, r.main)
	}
	sort.Slice(revs, func(i, j int) bool {
		a, b := revs[i], revs[j]
		return a.main < b.main || a.main == b.main && a.sub < b.sub
	})
	// Every revision above cdel must be whole: the state at the compaction
	// and the history above it are built from them.
	var lost []int64
	from := max(cdel, 1)
	i := sort.Search(len(revs), func(i int) bool { return revs[i].main > from })
	for m := from + 1; m <= rev; m++ {
		want, contiguous, last := int32(0), true, false
		for ; i < len(revs) && revs[i].main == m; i++ {
			contiguous = contiguous && revs[i].sub == want
			want++
			rec, _ := openRecord(revs[i], all[revs[i]], true)
			last = rec.last
		}
		if !contiguous || !last {
			lost = append(lost, m)
		}
	}
	newC := c
	if len(lost) > 0 {
		newC = max(c, lost[len(lost)-1])
		rep.Lost = append(rep.Lost, fmt.Sprintf("%d revision(s) have records missing: %s; the store is compacted at %d so that it serves no history with holes, and the keys those revisions changed may hold stale values",
			len(lost), spans(lost), newC))
	}
	if len(sv.damaged) > 0 && cdel >= 1 {
		rep.Lost = append(rep.Lost, fmt.Sprintf("records at or below the compaction %d on the %d damaged page(s) of the data file's tree (%d other copies found, which cannot be told from versions the compaction removed, were not used): the state at %d of the keys they held may be missing",
			cdel, len(sv.damaged), skipped, cdel))
	}
	if !sv.hasState && !sv.logHeader {
		rep.Lost = append(rep.Lost, "no state record and no log header verifies: the compaction is unknown, so versions a compaction had removed may have come back")
	}
	for _, r := range revs {
		if fromData[r] {
			rep.FromDataFile++
		} else {
			rep.FromLog++
		}
		sv.recs = append(sv.recs, memRecord{rev: r, val: all[r]})
	}
	// A record whose previous version is gone loses its pointer to it, so
	// that reading its PrevKV cannot fail.
	for i, m := range sv.recs {
		rec, err := openRecord(m.rev, m.val, false)
		if err != nil || !rec.hasPrev {
			continue
		}
		if p, ok := all[rec.prev]; !ok || !sameKey(rec.prev, p, rec.kv.Key) {
			rec.hasPrev = false
			sv.recs[i].val = rec.seal(revKey(m.rev))
		}
	}
	rep.Records = len(sv.recs)
	rep.Revision, rep.CompactRevision = rev, newC
	sv.out = salvaged{rev: rev, compact: newC}
	return rep
}

// spans writes revisions as ranges: "5, 7-9".
func spans(revs []int64) string {
	var b bytes.Buffer
	for i := 0; i < len(revs); {
		j := i
		for j+1 < len(revs) && revs[j+1] == revs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if i == j {
			fmt.Fprintf(&b, "%d", revs[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", revs[i], revs[j])
		}
		if b.Len() > 200 {
			b.WriteString(", …")
			break
		}
		i = j + 1
	}
	return b.String()
}

// write creates the recovered store in dir: a data file holding every
// record kept and the state, and a first, empty log segment.
func (sv *salvage) write(dir string, rep *RecoverReport) error {
	id := sv.storeID
	if id == 0 {
		id = uint64(time.Now().UnixNano())
	}
	tmp := filepath.Join(dir, creatingName)
	os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	st := storeState{format: formatVersion, storeID: id, rev: sv.out.rev, sched: sv.out.compact}
	err = db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket(bucketKey)
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := mb.Put(metaState, sealBytes(metaState, st.encode())); err != nil {
			return err
		}
		if err := mb.Put(metaFinished, sealBytes(metaFinished, encodeFinished(-1))); err != nil {
			return err
		}
		kb.FillPercent = 1 // appended in order
		for _, r := range sv.recs {
			if err := kb.Put(revKey(r.rev), r.val); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, dataFileName))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	seg, err := createSegment(OSFS{}, dir, segmentHeader{storeID: id, seq: 1, base: st.rev, baseCompact: st.sched}, false)
	if err != nil {
		return err
	}
	return seg.close()
}

// sameKey reports whether the sealed record r holds key.
func sameKey(r revision, sealed []byte, key string) bool {
	rec, err := openRecord(r, sealed, true)
	return err == nil && rec.kv.Key == key
}
