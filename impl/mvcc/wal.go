package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The write-ahead log.
//
// Every group commit is one frame appended to the current segment file and
// made durable with one fdatasync before any of its writers is answered. The
// data file (mvcc.db) is brought up to date from memory later, by a
// checkpoint, which then removes the segments it covers. Open replays the
// frames the data file does not hold yet.
//
// A segment, dir/wal-<seq, 16 hex digits>.log, starts with a header:
//
//	"WSPECLOG" | u32 version (1) | u32 0 | u64 store ID | u64 seq |
//	i64 base revision | i64 base compaction | u32 crc32c(the 56 bytes before) | u32 0
//
// (big-endian). The base is the revision and scheduled compaction of the
// store when the segment was started: its first frame continues from them.
// Then frames follow, one per group commit:
//
//	u32 n | u32 crc32c(n's 4 bytes) ^ frameSalt | u32 crc32c(payload) | payload (n bytes)
//
// and the payload is
//
//	uvarint prev | uvarint rev | uvarint compaction+1 (0: none) | uvarint count |
//	count × (12-byte record key | uvarint length | sealed record)
//
// prev is the revision the frame continues from, rev the revision after it;
// every revision in (prev, rev] has its records in the frame, in order, the
// last one flagged. The records are sealed exactly as the data file stores
// them (see record.seal), so a checkpoint copies them as they are.
//
// The length has a checksum of its own so that a damaged length is told
// from a frame cut short by a crash: the only frame a crash can leave
// incomplete is the last one, which was never acknowledged (its fdatasync
// had not returned).

const (
	segmentMagic     = "WSPECLOG"
	segmentVersion   = 1
	segmentHeaderLen = 64
	frameHeaderLen   = 12
	frameSalt        = 0x5753_4c47 // "WSLG": a length of zero never checks
	maxFrameLen      = 1 << 31
	sectorSize       = 512 // the unit a torn write leaves unwritten
)

// segmentName is the file name of segment seq.
func segmentName(seq uint64) string { return fmt.Sprintf("wal-%016x.log", seq) }

// parseSegmentName returns the sequence number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	if len(name) != len("wal-")+16+len(".log") || !strings.HasPrefix(name, "wal-") || !strings.HasSuffix(name, ".log") {
		return 0, false
	}
	seq, err := strconv.ParseUint(name[4:20], 16, 64)
	return seq, err == nil
}

// segmentHeader is what a segment's header says.
type segmentHeader struct {
	storeID     uint64
	seq         uint64
	base        int64 // the revision before the segment's first frame
	baseCompact int64 // the scheduled compaction then, -1 if none
}

func (h segmentHeader) encode() []byte {
	b := make([]byte, segmentHeaderLen)
	copy(b, segmentMagic)
	binary.BigEndian.PutUint32(b[8:], segmentVersion)
	binary.BigEndian.PutUint64(b[16:], h.storeID)
	binary.BigEndian.PutUint64(b[24:], h.seq)
	binary.BigEndian.PutUint64(b[32:], uint64(h.base))
	binary.BigEndian.PutUint64(b[40:], uint64(h.baseCompact))
	binary.BigEndian.PutUint32(b[48:], crc32.Checksum(b[:48], castagnoli))
	return b
}

func decodeSegmentHeader(b []byte) (segmentHeader, string) {
	if len(b) < segmentHeaderLen {
		return segmentHeader{}, fmt.Sprintf("the header is cut short (%d of %d bytes)", len(b), segmentHeaderLen)
	}
	if string(b[:8]) != segmentMagic {
		return segmentHeader{}, "no log header (wrong magic)"
	}
	if crc32.Checksum(b[:48], castagnoli) != binary.BigEndian.Uint32(b[48:]) {
		return segmentHeader{}, "the header fails its checksum"
	}
	if v := binary.BigEndian.Uint32(b[8:]); v != segmentVersion {
		return segmentHeader{}, fmt.Sprintf("log format version %d (this watchspec reads %d)", v, segmentVersion)
	}
	h := segmentHeader{
		storeID:     binary.BigEndian.Uint64(b[16:]),
		seq:         binary.BigEndian.Uint64(b[24:]),
		base:        int64(binary.BigEndian.Uint64(b[32:])),
		baseCompact: int64(binary.BigEndian.Uint64(b[40:])),
	}
	if h.base < 1 || h.baseCompact < -1 || h.baseCompact > h.base {
		return segmentHeader{}, fmt.Sprintf("the header's base revision %d and compaction %d are impossible", h.base, h.baseCompact)
	}
	return h, ""
}

// memRecord is a record as the log and the data file hold it: its
// revision and its sealed encoding.
type memRecord struct {
	rev revision
	val []byte
}

// frame is one group commit.
type frame struct {
	prev, rev int64
	compact   int64 // the compaction the batch scheduled, -1 if none
	recs      []memRecord
}

// appendFrame appends f, header and payload, to dst.
func appendFrame(dst []byte, f *frame) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	dst = binary.AppendUvarint(dst, uint64(f.prev))
	dst = binary.AppendUvarint(dst, uint64(f.rev))
	dst = binary.AppendUvarint(dst, uint64(f.compact+1))
	dst = binary.AppendUvarint(dst, uint64(len(f.recs)))
	var key [revKeyLen]byte
	for _, r := range f.recs {
		putRevKey(key[:], r.rev)
		dst = append(dst, key[:]...)
		dst = binary.AppendUvarint(dst, uint64(len(r.val)))
		dst = append(dst, r.val...)
	}
	n := len(dst) - start - frameHeaderLen
	h := dst[start : start+frameHeaderLen]
	binary.BigEndian.PutUint32(h[0:], uint32(n))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(h[0:4], castagnoli)^frameSalt)
	binary.BigEndian.PutUint32(h[8:], crc32.Checksum(dst[start+frameHeaderLen:], castagnoli))
	return dst
}

// decodeFrame decodes a payload whose checksum matched, and checks that it
// is a well-formed batch: every revision in (prev, rev] complete, in order.
// The records' values alias b.
func decodeFrame(b []byte) (frame, error) {
	var f frame
	u := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("bad %s", what)
		}
		b = b[n:]
		return v, nil
	}
	prev, err := u("previous revision")
	if err != nil {
		return f, err
	}
	rev, err := u("revision")
	if err != nil {
		return f, err
	}
	comp, err := u("compaction")
	if err != nil {
		return f, err
	}
	count, err := u("record count")
	if err != nil {
		return f, err
	}
	f.prev, f.rev, f.compact = int64(prev), int64(rev), int64(comp)-1
	if f.prev < 1 || f.rev < f.prev || f.compact < -1 || f.compact > f.rev || count > uint64(len(b)) {
		return f, fmt.Errorf("impossible revisions %d..%d, compaction %d, %d records", f.prev, f.rev, f.compact, count)
	}
	f.recs = make([]memRecord, 0, count)
	next := revision{main: f.prev + 1}
	for i := uint64(0); i < count; i++ {
		if len(b) < revKeyLen {
			return f, errors.New("record key cut short")
		}
		key := b[:revKeyLen]
		r, _ := parseRevKey(key)
		b = b[revKeyLen:]
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return f, fmt.Errorf("record %d.%d: bad length", r.main, r.sub)
		}
		val := b[w : w+int(n)]
		b = b[w+int(n):]
		if r != next {
			return f, fmt.Errorf("record %d.%d where %d.%d was due", r.main, r.sub, next.main, next.sub)
		}
		rec, err := openRecord(r, val, true)
		if err != nil {
			return f, err
		}
		if rec.last {
			next = revision{main: r.main + 1}
		} else {
			next.sub++
		}
		f.recs = append(f.recs, memRecord{rev: r, val: val})
	}
	if len(b) != 0 {
		return f, errors.New("trailing bytes")
	}
	if next != (revision{main: f.rev + 1}) {
		return f, fmt.Errorf("records end at %d.%d, the frame claims revisions up to %d", next.main, next.sub, f.rev)
	}
	return f, nil
}

// logError is a failed append or rotation. The segment was put back as it
// was (the frame truncated away) unless fatal is set.
type logError struct {
	err     error
	noSpace bool // the disk is full; nothing was kept
	fatal   bool // the segment's state is unknown: the store must stop writing
}

func (e *logError) Error() string { return "mvcc: write-ahead log: " + e.err.Error() }
func (e *logError) Unwrap() error { return e.err }

// segment is the log segment the store appends to.
type segment struct {
	fs     FS
	path   string
	hdr    segmentHeader
	f      File
	off    int64 // the end of what was written and synced
	noSync bool
	// The file is reserved (allocator) up to alloc, zeros beyond off; 0
	// when nothing is, and for good once a reservation failed (noAlloc).
	alloc   int64
	noAlloc bool
}

// segmentAllocStep is how much of a segment the log reserves at a time
// ahead of its appends (one change of the file's size, made durable with
// the next fdatasync, per step instead of one per group commit).
const segmentAllocStep = 4 << 20

// createSegment creates segment hdr.seq in dir, writes its header and makes
// it durable, directory entry included.
func createSegment(fs FS, dir string, hdr segmentHeader, noSync bool) (*segment, error) {
	g, err := openSegment(fs, dir, hdr.seq, noSync)
	if err != nil {
		return nil, err
	}
	if err := g.start(hdr); err != nil {
		return nil, err
	}
	if err := g.syncHeader(); err != nil {
		return nil, err
	}
	return g, nil
}

// openSegment creates the file of segment seq, empty, and makes its
// directory entry durable: a frame acknowledged in it must not vanish with
// its directory entry. Its header is written by start.
func openSegment(fs FS, dir string, seq uint64, noSync bool) (*segment, error) {
	path := filepath.Join(dir, segmentName(seq))
	f, err := fs.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, &logError{err: err, noSpace: isNoSpace(err)}
	}
	g := &segment{fs: fs, path: path, f: f, noSync: noSync}
	// Reserve the first step now: a new segment is made while no writer
	// waits for it (a checkpoint makes the next one before it rotates).
	g.reserve(segmentAllocStep)
	if !noSync {
		if err := fs.SyncDir(dir); err != nil {
			return nil, g.abandon(err)
		}
	}
	return g, nil
}

// start writes the segment's header (durable with the first frame's
// fdatasync, or syncHeader's).
func (g *segment) start(hdr segmentHeader) error {
	b := hdr.encode()
	if _, err := g.f.WriteAt(b, 0); err != nil {
		return g.abandon(err)
	}
	g.hdr, g.off = hdr, int64(len(b))
	return nil
}

// syncHeader makes the header durable.
func (g *segment) syncHeader() error {
	if g.noSync {
		return nil
	}
	if err := g.f.Sync(); err != nil {
		return g.abandon(err)
	}
	return nil
}

// abandon closes and removes a segment that could not be started.
func (g *segment) abandon(err error) error {
	g.f.Close()
	if rerr := g.fs.Remove(g.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return &logError{err: fmt.Errorf("%w (and removing the unfinished %s: %v)", err, g.path, rerr), fatal: true}
	}
	return &logError{err: err, noSpace: isNoSpace(err)}
}

// append writes b at the end of the segment and makes it durable: one
// write and one fdatasync. On failure the segment is truncated back to what
// it held before (and that truncation made durable if the fdatasync had
// failed, so that its state is known); if even that fails, the error is
// fatal.
func (g *segment) append(b []byte) error {
	g.reserve(g.off + int64(len(b)))
	_, err := g.f.WriteAt(b, g.off)
	synced := false
	if err == nil && !g.noSync {
		err = g.f.Sync()
		synced = true
	}
	if err == nil {
		g.off += int64(len(b))
		return nil
	}
	terr := g.f.Truncate(g.off)
	g.alloc = 0 // the reservation went with the truncation
	if terr == nil && synced {
		terr = g.f.Sync()
	}
	if terr != nil {
		return &logError{err: fmt.Errorf("%w; taking the failed write back failed too: %v", err, terr), fatal: true}
	}
	if isNoSpace(err) {
		return &logError{err: err, noSpace: true}
	}
	return &logError{err: err, fatal: true}
}

func (g *segment) close() error { return g.f.Close() }

// reserve makes sure, if the file can, that the segment is reserved up to
// end at least, a segmentAllocStep at a time. The zeros it adds after the
// last frame read back as the clean end of the segment (scanSegment). A
// reservation that fails (a full disk, a file system without fallocate) is
// not an error: the appends then grow the file as they go, and the first
// failure turns reserving off for the segment.
func (g *segment) reserve(end int64) {
	if g.noAlloc || g.noSync || end <= g.alloc {
		return
	}
	a, ok := g.f.(allocator)
	if !ok {
		g.noAlloc = true
		return
	}
	from := max(g.alloc, g.off)
	size := max(segmentAllocStep, end-from)
	if err := a.Allocate(from, size); err != nil {
		g.noAlloc = true
		return
	}
	g.alloc = from + size
}

// Reading the log back.

// tailKind says how a segment ends.
type tailKind int

const (
	tailClean tailKind = iota // after its last frame: nothing, or zeros
	tailTorn                  // the shape a crash leaves in a write it cut
	tailBad                   // damage: a frame fails its checks and is not a cut write
)

// scannedSegment is one segment file as read back.
type scannedSegment struct {
	path   string
	seq    uint64
	size   int64
	hdr    segmentHeader
	hdrBad string // why the header is unusable ("" if it is fine)
	frames []scannedFrame
	end    int64 // the offset after the last good frame
	tail   tailKind
	what   string // the tail's description, when not clean
	after  []scannedFrame
}

type scannedFrame struct {
	frame
	off, len int64
}

// lastRev returns the revision and compaction after the segment's last good
// frame (its base when it has none).
func (s *scannedSegment) lastRev() (rev, compact int64) {
	rev, compact = s.hdr.base, s.hdr.baseCompact
	for _, f := range s.frames {
		rev = f.rev
		compact = max(compact, f.compact)
	}
	return rev, compact
}

// listSegments returns the sequence numbers of the segment files in dir,
// ascending.
func listSegments(names []string) []uint64 {
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseSegmentName(n); ok {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}

// scanSegment reads a segment's header and frames, and classifies how it
// ends. It never panics on damaged input.
func scanSegment(path string, seq uint64, data []byte) *scannedSegment {
	s := &scannedSegment{path: path, seq: seq, size: int64(len(data))}
	s.hdr, s.hdrBad = decodeSegmentHeader(data)
	if s.hdrBad != "" {
		s.end = 0
		if len(resync(data, 0)) == 0 && (len(data) < segmentHeaderLen || allZero(data[:segmentHeaderLen])) {
			s.tail, s.what = tailTorn, fmt.Sprintf("a segment whose creation a crash cut (%d bytes, no header)", len(data))
		} else {
			s.tail, s.what = tailBad, s.hdrBad
		}
		return s
	}
	if s.hdr.seq != seq {
		s.hdrBad = fmt.Sprintf("the header names segment %d", s.hdr.seq)
		s.tail, s.what = tailBad, s.hdrBad
		return s
	}
	off := int64(segmentHeaderLen)
	prev := s.hdr.base
	z := zerosFrom(data)
	for {
		f, n, kind, what := readFrame(data, off, z)
		if kind == frameTorn {
			// A frame with unwritten sectors is the last write a crash
			// cut only if nothing good follows it.
			if len(resync(data, off+1)) == 0 {
				kind = frameCut
			} else {
				kind = frameBad
			}
		}
		switch kind {
		case frameOK:
		case frameEnd:
			s.end, s.tail = off, tailClean
		case frameCut:
			s.end, s.tail, s.what = off, tailTorn, what
		default:
			s.end, s.tail, s.what = off, tailBad, what
		}
		if kind != frameOK {
			break
		}
		if f.prev != prev {
			s.end, s.tail = off, tailBad
			s.what = fmt.Sprintf("the frame at offset %d continues from revision %d, the one before it ended at %d", off, f.prev, prev)
			break
		}
		s.frames = append(s.frames, scannedFrame{frame: f, off: off, len: n})
		prev = f.rev
		off += n
	}
	if s.tail == tailBad {
		s.after = resync(data, s.end+1)
	}
	return s
}

// frameKind is what readFrame found.
type frameKind int

const (
	frameOK   frameKind = iota
	frameEnd            // nothing, or zeros, to the end of the segment
	frameCut            // the segment ends inside the frame: a write cut short
	frameTorn           // it fails its checks and has unwritten (zero) sectors: a write cut by a power failure, if nothing good follows
	frameBad            // damage
)

// readFrame reads the frame at off; zeroFrom is where the zeros that end
// data begin (see zerosFrom).
func readFrame(data []byte, off, zeroFrom int64) (f frame, n int64, kind frameKind, what string) {
	rest := data[off:]
	if off >= zeroFrom {
		return f, 0, frameEnd, ""
	}
	if len(rest) < frameHeaderLen {
		return f, 0, frameCut, fmt.Sprintf("%d bytes at offset %d: a frame header cut short", len(rest), off)
	}
	plen := binary.BigEndian.Uint32(rest[0:])
	if crc32.Checksum(rest[0:4], castagnoli)^frameSalt != binary.BigEndian.Uint32(rest[4:]) {
		if off+frameHeaderLen > zeroFrom {
			// Its end lies in the zeros that end the segment (reserved
			// ahead of the appends): a write cut short, as when the file
			// ends inside it.
			return f, 0, frameCut, fmt.Sprintf("the frame header at offset %d is cut short (zeros after byte %d)", off, zeroFrom-off)
		}
		if allZero(rest[:frameHeaderLen]) || tornSectors(data, off, off+frameHeaderLen) {
			return f, 0, frameTorn, fmt.Sprintf("the frame at offset %d has an unwritten header: a write cut by a crash", off)
		}
		return f, 0, frameBad, fmt.Sprintf("the frame header at offset %d fails its checksum", off)
	}
	if plen == 0 || plen > maxFrameLen {
		return f, 0, frameBad, fmt.Sprintf("the frame at offset %d claims %d bytes", off, plen)
	}
	total := int64(frameHeaderLen) + int64(plen)
	if total > int64(len(rest)) {
		return f, 0, frameCut, fmt.Sprintf("the frame at offset %d is cut short (%d of %d bytes)", off, len(rest), total)
	}
	payload := rest[frameHeaderLen:total]
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(rest[8:]) {
		if off+total > zeroFrom {
			return f, 0, frameCut, fmt.Sprintf("the frame at offset %d is cut short (%d of %d bytes, zeros after them)", off, zeroFrom-off, total)
		}
		// Torn only if it is the last thing written — nothing but zeros
		// after it (a segment reserved ahead holds zeros to its end): a
		// write after it would have come after its fdatasync, so it was
		// acknowledged.
		if off+total >= zeroFrom && tornSectors(data, off, off+total) {
			return f, 0, frameTorn, fmt.Sprintf("the frame at offset %d (%d bytes) has unwritten sectors: a write cut by a crash", off, total)
		}
		return f, 0, frameBad, fmt.Sprintf("the frame at offset %d (%d bytes) fails its checksum", off, total)
	}
	f, err := decodeFrame(payload)
	if err != nil {
		return f, 0, frameBad, fmt.Sprintf("the frame at offset %d: %v", off, err)
	}
	return f, total, frameOK, ""
}

// tornSectors reports whether some sector-aligned part of data[from:to] is
// all zeros: what a write cut by a power failure leaves (the sectors not yet
// written read as zeros), unlike a flipped bit. etcd's WAL decoder uses the
// same test (server/storage/wal/decoder.go, isTornEntry).
func tornSectors(data []byte, from, to int64) bool {
	for s := from; s < to; {
		e := min((s/sectorSize+1)*sectorSize, to)
		if allZero(data[s:e]) {
			return true
		}
		s = e
	}
	return false
}

// resync finds the good frames after damage at from, to say what is still
// intact after it (a frame checks itself: both checksums and its decoding).
func resync(data []byte, from int64) []scannedFrame {
	var out []scannedFrame
	z := zerosFrom(data)
	for off := from; off+frameHeaderLen <= int64(len(data)); {
		f, n, kind, _ := readFrame(data, off, z)
		if kind == frameOK {
			out = append(out, scannedFrame{frame: f, off: off, len: n})
			off += n
			continue
		}
		if kind == frameEnd {
			break // zeros to the end
		}
		off++
	}
	return out
}

func allZero(b []byte) bool {
	return len(bytes.TrimLeft(b, "\x00")) == 0
}

// zerosFrom returns the offset from which data holds only zeros.
func zerosFrom(data []byte) int64 {
	return int64(len(bytes.TrimRight(data, "\x00")))
}
