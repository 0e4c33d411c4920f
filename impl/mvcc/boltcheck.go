package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
)

// A check of the data file, mvcc.db, before bbolt is allowed to open it.
//
// bbolt trusts its file: it maps it and follows page numbers and offsets as
// they are, so a truncated or damaged file makes it read past the mapping
// (SIGBUS), index out of range or fail an assertion (panics), and with
// NoFreelistSync it walks every page at Open. So before bbolt sees the file,
// checkBolt reads it with plain reads and checks everything bbolt will rely
// on: the two meta pages (their FNV-64a checksums, as bbolt checks them), the
// size, and every reachable page — its id, type, overflow, element offsets
// (bbolt lays a page's keys and values out back to back after the element
// array, so every offset is known in advance and any changed count, offset or
// size shows), key order within the bounds its parent gives, no page reached
// twice — down to every record, whose CRC-32C it verifies. It never panics:
// every offset is checked before it is used.
//
// The page layout is bbolt v1.5.0's (internal/common/page.go, meta.go,
// inode.go WriteInodeToPage), in the machine's byte order.

const (
	bMetaFlag     = 0x04
	bBranchFlag   = 0x01
	bLeafFlag     = 0x02
	bFreelistFlag = 0x10
	bBucketFlag   = 0x01 // a leaf element that is a bucket
	bMagic        = 0xED0CDAED
	bVersion      = 2
	bNoFreelist   = ^uint64(0)
	bPageHeader   = 16
	bElemSize     = 16
	bMetaSize     = 64
	bBucketHeader = 16
)

// boltMeta is one meta page as read.
type boltMeta struct {
	valid          bool
	err            string
	magicOK        bool
	pageSize       uint32
	root, freelist uint64
	hwm            uint64 // pages in use: the file must hold at least this many
	txid           uint64
}

// boltInfo is what checkBolt found.
type boltInfo struct {
	pageSize   int64
	meta       boltMeta    // the meta page bbolt will use
	metas      [2]boltMeta // both, as read
	metaUsed   int
	notBolt    bool   // neither meta page looks like bbolt's: a foreign file
	foreign    string // a bbolt file, but not a watchspec store: why
	format1    bool   // a store of an older watchspec (format 1, no checksums)
	state      storeState
	hasState   bool
	finished   int64
	records    int64
	pages      int64 // reachable pages
	damage     []Damage
	damagedPgs map[uint64]bool
	used       map[uint64]bool // the pages reached
}

// storeState is the data file's "state" record: what the data file holds.
type storeState struct {
	format  uint64
	storeID uint64
	rev     int64 // every record up to rev is in the data file
	sched   int64 // the scheduled compaction, -1 if none
}

func (st storeState) encode() []byte {
	b := binary.AppendUvarint(nil, st.format)
	b = binary.BigEndian.AppendUint64(b, st.storeID)
	b = binary.AppendUvarint(b, uint64(st.rev))
	return binary.AppendUvarint(b, uint64(st.sched+1))
}

func decodeState(b []byte) (storeState, error) {
	var st storeState
	var n int
	if st.format, n = binary.Uvarint(b); n <= 0 {
		return st, errors.New("bad format")
	}
	b = b[n:]
	if len(b) < 8 {
		return st, errors.New("cut short")
	}
	st.storeID = binary.BigEndian.Uint64(b)
	b = b[8:]
	rev, n := binary.Uvarint(b)
	if n <= 0 {
		return st, errors.New("bad revision")
	}
	b = b[n:]
	sched, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return st, errors.New("bad compaction")
	}
	st.rev, st.sched = int64(rev), int64(sched)-1
	if st.rev < 1 || st.sched < -1 || st.sched > st.rev {
		return st, fmt.Errorf("impossible revision %d, compaction %d", st.rev, st.sched)
	}
	return st, nil
}

func encodeFinished(f int64) []byte { return binary.AppendUvarint(nil, uint64(f+1)) }

func decodeFinished(b []byte) (int64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, errors.New("bad finished compaction")
	}
	return int64(v) - 1, nil
}

// Keys of the meta bucket.
var (
	metaState    = []byte("state")    // storeState, sealed
	metaFinished = []byte("finished") // the last physically finished compaction, sealed
	metaFormat1  = []byte("format")   // format 1 (older watchspec) only
)

type boltChecker struct {
	r        io.ReaderAt
	size     int64
	file     string
	info     *boltInfo
	pageSize int64
	hwm      uint64
	visited  map[uint64]bool
	stop     bool // too much damage to go on
}

func (c *boltChecker) damage(off int64, format string, args ...any) {
	c.info.damage = append(c.info.damage, Damage{File: c.file, Offset: off, What: fmt.Sprintf(format, args...)})
}

func (c *boltChecker) pageDamage(id uint64, format string, args ...any) {
	if c.info.damagedPgs == nil {
		c.info.damagedPgs = map[uint64]bool{}
	}
	c.info.damagedPgs[id] = true
	c.damage(int64(id)*c.pageSize, "page %d: %s", id, fmt.Sprintf(format, args...))
}

// readMeta reads a meta page at off.
func readMeta(r io.ReaderAt, size, off int64, id uint64) boltMeta {
	var m boltMeta
	buf := make([]byte, bPageHeader+bMetaSize)
	if off+int64(len(buf)) > size {
		m.err = "beyond the end of the file"
		return m
	}
	if _, err := r.ReadAt(buf, off); err != nil {
		m.err = err.Error()
		return m
	}
	ne := binary.NativeEndian
	meta := buf[bPageHeader:]
	m.magicOK = ne.Uint32(meta[0:]) == bMagic
	m.pageSize = ne.Uint32(meta[8:])
	m.root = ne.Uint64(meta[16:])
	m.freelist = ne.Uint64(meta[32:])
	m.hwm = ne.Uint64(meta[40:])
	m.txid = ne.Uint64(meta[48:])
	h := fnv.New64a()
	h.Write(meta[:56])
	switch {
	case !m.magicOK:
		m.err = "no bbolt magic number"
	case ne.Uint32(meta[4:]) != bVersion:
		m.err = fmt.Sprintf("bbolt format version %d", ne.Uint32(meta[4:]))
	case h.Sum64() != ne.Uint64(meta[56:]):
		m.err = "fails its checksum"
	case ne.Uint16(buf[8:]) != bMetaFlag || ne.Uint64(buf[0:]) != id:
		m.err = fmt.Sprintf("page header says page %d, type %#x", ne.Uint64(buf[0:]), ne.Uint16(buf[8:]))
	case m.pageSize < 512 || m.pageSize > 1<<24 || bits.OnesCount32(m.pageSize) != 1:
		m.err = fmt.Sprintf("impossible page size %d", m.pageSize)
	default:
		m.valid = true
	}
	return m
}

// checkBolt checks the data file read through r (size bytes, named file in
// messages). See the comment at the top of this file.
func checkBolt(r io.ReaderAt, size int64, file string) *boltInfo {
	info := &boltInfo{metaUsed: -1, finished: -1}
	c := &boltChecker{r: r, size: size, file: file, info: info, visited: map[uint64]bool{}}
	if size == 0 {
		c.damage(-1, "the file is empty (0 bytes)")
		info.notBolt = true
		return info
	}
	info.metas[0] = readMeta(r, size, 0, 0)
	ps := int64(0)
	if info.metas[0].valid {
		ps = int64(info.metas[0].pageSize)
		info.metas[1] = readMeta(r, size, ps, 1)
	} else {
		// As bbolt does: look for the second meta page at every page size.
		for i := 0; i <= 14; i++ {
			m := readMeta(r, size, 1024<<i, 1)
			if m.valid && int64(m.pageSize) == 1024<<i {
				info.metas[1] = m
				ps = 1024 << i
				break
			}
			if i == 2 {
				info.metas[1] = m // the one at 4 KiB, for the messages
			}
		}
	}
	if !info.metas[0].valid && !info.metas[1].valid {
		if !info.metas[0].magicOK && !info.metas[1].magicOK {
			info.notBolt = true
			c.damage(0, "not a bbolt data file (no bbolt meta page at its start; %d bytes)", size)
		} else {
			c.damage(0, "both meta pages are damaged (page 0: %s; page 1: %s)", info.metas[0].err, info.metas[1].err)
		}
		return info
	}
	use := 0
	if !info.metas[0].valid || (info.metas[1].valid && info.metas[1].txid > info.metas[0].txid) {
		use = 1
	}
	info.metaUsed, info.meta = use, info.metas[use]
	c.pageSize, info.pageSize = ps, ps
	m := info.meta
	c.hwm = m.hwm
	switch {
	case m.hwm < 3 || m.root < 2 || m.root >= m.hwm:
		c.damage(ps*int64(use), "meta page %d: impossible root page %d of %d", use, m.root, m.hwm)
		return info
	case m.freelist != bNoFreelist && (m.freelist < 2 || m.freelist >= m.hwm):
		c.damage(ps*int64(use), "meta page %d: impossible freelist page %d of %d", use, m.freelist, m.hwm)
		return info
	case m.hwm > uint64(size/ps):
		c.damage(size, "the file is cut short: %d bytes hold %d pages of %d bytes, its meta page %d (transaction %d) says %d", size, size/ps, ps, use, m.txid, m.hwm)
		return info
	}
	c.visited[0], c.visited[1] = true, true
	if m.freelist != bNoFreelist {
		c.checkFreelist(m.freelist)
	}
	if len(info.damage) > 0 {
		return info
	}
	c.checkRoot(m.root)
	info.pages = int64(len(c.visited))
	info.used = c.visited
	return info
}

// page reads page id (with its overflow pages) and checks its header.
func (c *boltChecker) page(id uint64, wantFlags ...uint16) ([]byte, uint16, bool) {
	if id < 2 || id >= c.hwm {
		c.pageDamage(id, "a reference to page %d, outside the %d pages in use", id, c.hwm)
		return nil, 0, false
	}
	if c.visited[id] {
		c.pageDamage(id, "reached twice (a cycle or a shared page)")
		return nil, 0, false
	}
	hdr := make([]byte, c.pageSize)
	if _, err := c.r.ReadAt(hdr, int64(id)*c.pageSize); err != nil {
		c.pageDamage(id, "unreadable: %v", err)
		return nil, 0, false
	}
	ne := binary.NativeEndian
	pid, flags, overflow := ne.Uint64(hdr[0:]), ne.Uint16(hdr[8:]), uint64(ne.Uint32(hdr[12:]))
	if pid != id {
		c.pageDamage(id, "its header says page %d", pid)
		return nil, 0, false
	}
	ok := false
	for _, f := range wantFlags {
		ok = ok || flags == f
	}
	if !ok {
		c.pageDamage(id, "unexpected page type %#x", flags)
		return nil, 0, false
	}
	if id+overflow >= c.hwm {
		c.pageDamage(id, "%d overflow pages run past the %d pages in use", overflow, c.hwm)
		return nil, 0, false
	}
	for i := uint64(0); i <= overflow; i++ {
		if c.visited[id+i] {
			c.pageDamage(id, "its overflow page %d is reached twice", id+i)
			return nil, 0, false
		}
		c.visited[id+i] = true
	}
	buf := hdr
	if overflow > 0 {
		buf = make([]byte, int64(overflow+1)*c.pageSize)
		if _, err := c.r.ReadAt(buf, int64(id)*c.pageSize); err != nil {
			c.pageDamage(id, "unreadable: %v", err)
			return nil, 0, false
		}
	}
	return buf, flags, true
}

func (c *boltChecker) checkFreelist(id uint64) {
	buf, _, ok := c.page(id, bFreelistFlag)
	if !ok {
		return
	}
	ne := binary.NativeEndian
	count, idx := uint64(ne.Uint16(buf[10:])), uint64(0)
	if count == 0xFFFF {
		if len(buf) < bPageHeader+8 {
			c.pageDamage(id, "freelist cut short")
			return
		}
		count, idx = ne.Uint64(buf[bPageHeader:]), 1
	}
	if count > uint64(len(buf)-bPageHeader)/8 || bPageHeader+(idx+count)*8 > uint64(len(buf)) {
		c.pageDamage(id, "freelist of %d entries does not fit", count)
		return
	}
	for i := idx; i < idx+count; i++ {
		if p := ne.Uint64(buf[bPageHeader+8*i:]); p < 2 || p >= c.hwm {
			c.pageDamage(id, "freelist names page %d of %d", p, c.hwm)
			return
		}
	}
}

// element is one element of a page, with its key and value (value nil for a
// branch element, whose child is pgid).
type element struct {
	flags uint32
	key   []byte
	value []byte
	pgid  uint64
}

// elements parses the elements of a branch or leaf page held in buf
// (a page, or an inline bucket's page), checking that they lie exactly where
// bbolt puts them. exact demands that they end at the end of buf (inline
// pages).
func elements(buf []byte, leaf, exact bool) ([]element, string) {
	ne := binary.NativeEndian
	if len(buf) < bPageHeader {
		return nil, "cut short"
	}
	count := uint64(ne.Uint16(buf[10:]))
	next := uint64(bPageHeader) + count*bElemSize
	if next > uint64(len(buf)) {
		return nil, fmt.Sprintf("%d elements do not fit", count)
	}
	if !leaf && count == 0 {
		return nil, "a branch page without elements"
	}
	out := make([]element, 0, count)
	for i := uint64(0); i < count; i++ {
		e := uint64(bPageHeader) + i*bElemSize
		var el element
		var pos, ksize, vsize uint64
		if leaf {
			el.flags = ne.Uint32(buf[e:])
			pos, ksize, vsize = uint64(ne.Uint32(buf[e+4:])), uint64(ne.Uint32(buf[e+8:])), uint64(ne.Uint32(buf[e+12:]))
		} else {
			pos, ksize, el.pgid = uint64(ne.Uint32(buf[e:])), uint64(ne.Uint32(buf[e+4:])), ne.Uint64(buf[e+8:])
		}
		if e+pos != next {
			return nil, fmt.Sprintf("element %d starts at %d, where %d was due", i, e+pos, next)
		}
		if ksize == 0 || next+ksize+vsize > uint64(len(buf)) {
			return nil, fmt.Sprintf("element %d (key %d bytes, value %d) runs past the page", i, ksize, vsize)
		}
		if el.flags&^bBucketFlag != 0 {
			return nil, fmt.Sprintf("element %d has unknown flags %#x", i, el.flags)
		}
		el.key = buf[next : next+ksize]
		if leaf {
			el.value = buf[next+ksize : next+ksize+vsize]
		}
		next += ksize + vsize
		out = append(out, el)
	}
	if exact && next != uint64(len(buf)) {
		return nil, fmt.Sprintf("its elements end at %d of %d bytes", next, len(buf))
	}
	return out, ""
}

// walk visits the tree rooted at page id, calling leaf for every leaf
// element in key order. Keys must lie in [lo, hi) (nil: unbounded) and
// ascend strictly. It returns false after damage.
func (c *boltChecker) walk(id uint64, lo, hi []byte, prev *[]byte, leaf func(el element) bool) bool {
	buf, flags, ok := c.page(id, bBranchFlag, bLeafFlag)
	if !ok {
		return false
	}
	els, bad := elements(buf, flags == bLeafFlag, false)
	if bad != "" {
		c.pageDamage(id, "%s", bad)
		return false
	}
	for i, el := range els {
		if lo != nil && bytes.Compare(el.key, lo) < 0 || hi != nil && bytes.Compare(el.key, hi) >= 0 {
			c.pageDamage(id, "key %d (%x) lies outside the range its parent gives it", i, el.key)
			return false
		}
		if *prev != nil && bytes.Compare(el.key, *prev) <= 0 {
			c.pageDamage(id, "key %d (%x) is out of order", i, el.key)
			return false
		}
		if flags == bLeafFlag {
			*prev = el.key
			if !leaf(el) {
				return false
			}
			continue
		}
		var next []byte
		if i+1 < len(els) {
			next = els[i+1].key
		} else {
			next = hi
		}
		if !c.walk(el.pgid, el.key, next, prev, leaf) {
			return false
		}
		if *prev == nil || bytes.Compare(*prev, el.key) < 0 {
			// An empty subtree under a branch key: keep the order check strict.
			*prev = el.key
		}
	}
	return true
}

// bucket visits the elements of the bucket whose header and (inline) page
// are v, the value of its entry named name.
func (c *boltChecker) bucket(name string, owner uint64, v []byte, leaf func(el element) bool) bool {
	if len(v) < bBucketHeader {
		c.pageDamage(owner, "bucket %q: header cut short", name)
		return false
	}
	root := binary.NativeEndian.Uint64(v[0:])
	var prev []byte
	if root != 0 {
		return c.walk(root, nil, nil, &prev, leaf)
	}
	inline := v[bBucketHeader:]
	if len(inline) < bPageHeader || binary.NativeEndian.Uint16(inline[8:]) != bLeafFlag || binary.NativeEndian.Uint32(inline[12:]) != 0 {
		c.pageDamage(owner, "bucket %q: damaged inline page", name)
		return false
	}
	els, bad := elements(inline, true, true)
	if bad != "" {
		c.pageDamage(owner, "bucket %q (inline): %s", name, bad)
		return false
	}
	for i, el := range els {
		if prev != nil && bytes.Compare(el.key, prev) <= 0 {
			c.pageDamage(owner, "bucket %q (inline): key %d out of order", name, i)
			return false
		}
		prev = el.key
		if !leaf(el) {
			return false
		}
	}
	return true
}

// checkRoot checks the root bucket — exactly watchspec's buckets "key" and
// "meta" — then "meta" and "key".
func (c *boltChecker) checkRoot(root uint64) {
	info := c.info
	var buckets []string
	values := map[string][]byte{}
	owners := map[string]uint64{}
	var prev []byte
	if !c.walk(root, nil, nil, &prev, func(el element) bool {
		buckets = append(buckets, fmt.Sprintf("%q", el.key))
		if el.flags&bBucketFlag != 0 {
			values[string(el.key)] = el.value
			owners[string(el.key)] = root
		}
		return true
	}) {
		return
	}
	if len(buckets) != 2 || values["key"] == nil || values["meta"] == nil {
		info.foreign = fmt.Sprintf("its top-level entries are %v, watchspec's are \"key\" and \"meta\"", buckets)
		return
	}
	// meta: the state record first, so that the records can be judged by it.
	var state, finished []byte
	var format1 bool
	var metaKeys []string
	if !c.bucket("meta", root, values["meta"], func(el element) bool {
		metaKeys = append(metaKeys, string(el.key))
		switch {
		case el.flags != 0:
		case bytes.Equal(el.key, metaState):
			state = el.value
		case bytes.Equal(el.key, metaFinished):
			finished = el.value
		case bytes.Equal(el.key, metaFormat1):
			format1 = true
		}
		return true
	}) {
		return
	}
	if state == nil {
		if format1 {
			info.format1 = true
			return
		}
		info.foreign = fmt.Sprintf("its meta bucket holds %q and no watchspec state", metaKeys)
		return
	}
	body, ok := unseal(metaState, state)
	if !ok {
		c.damage(-1, "the state record (bucket meta) fails its checksum")
		return
	}
	st, err := decodeState(body)
	if err != nil {
		c.damage(-1, "the state record (bucket meta): %v", err)
		return
	}
	if st.format != formatVersion {
		info.foreign = fmt.Sprintf("it is in store format %d, this watchspec reads format %d", st.format, formatVersion)
		return
	}
	info.state, info.hasState = st, true
	if finished != nil {
		body, ok := unseal(metaFinished, finished)
		f, err := decodeFinished(body)
		if !ok || err != nil || f > st.sched {
			c.damage(-1, "the finished-compaction record (bucket meta) is damaged")
			return
		}
		info.finished = f
	}
	// key: every record verifies; above the scheduled compaction every
	// revision up to the state's is complete (compaction removes records
	// only at or below it).
	complete := max(st.sched, 1) // revisions above it must be complete
	cur := revision{main: complete, sub: 0}
	curLast := true
	c.bucket("key", root, values["key"], func(el element) bool {
		if el.flags != 0 {
			c.damage(-1, "bucket key: a nested bucket %x", el.key)
			return false
		}
		r, err := parseRevKey(el.key)
		if err != nil || r.main < 1 || r.sub < 0 {
			c.damage(-1, "bucket key: a record key %x that is no revision", el.key)
			return false
		}
		rec, err := openRecord(r, el.value, true)
		if err != nil {
			c.damage(-1, "bucket key: %v", err)
			return false
		}
		if r.main > st.rev {
			c.damage(-1, "bucket key: record %d.%d lies above the data file's revision %d", r.main, r.sub, st.rev)
			return false
		}
		if r.main > complete {
			var due revision
			if curLast {
				due = revision{main: cur.main + 1}
			} else {
				due = revision{main: cur.main, sub: cur.sub + 1}
			}
			if r != due {
				c.damage(-1, "bucket key: record %d.%d where %d.%d was due: records are missing", r.main, r.sub, due.main, due.sub)
				return false
			}
			cur, curLast = r, rec.last
		}
		info.records++
		return true
	})
	if len(info.damage) == 0 && st.rev > complete && (cur.main != st.rev || !curLast) {
		c.damage(-1, "bucket key: the records end at revision %d, the data file's state says %d: records are missing", cur.main, st.rev)
	}
}
