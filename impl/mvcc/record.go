package mvcc

import (
	"encoding/binary"
	"fmt"
)

// A revision names one record: the write revision (main) and the position of
// the write within it (sub), as in etcd.
type revision struct {
	main int64
	sub  int32
}

// revKeyLen is the length of a record's key in the data file.
const revKeyLen = 12

// revKey encodes r as the 12-byte key of its record: main and sub in
// big-endian order, so that byte order is revision order.
func revKey(r revision) []byte {
	var b [revKeyLen]byte
	putRevKey(b[:], r)
	return b[:]
}

func putRevKey(b []byte, r revision) {
	binary.BigEndian.PutUint64(b[0:8], uint64(r.main))
	binary.BigEndian.PutUint32(b[8:12], uint32(r.sub))
}

func parseRevKey(b []byte) (revision, error) {
	if len(b) != revKeyLen {
		return revision{}, fmt.Errorf("%w: record key of %d bytes", ErrCorrupt, len(b))
	}
	return revision{main: int64(binary.BigEndian.Uint64(b[0:8])), sub: int32(binary.BigEndian.Uint32(b[8:12]))}, nil
}

// record is what the data file holds for one write: a put of a key-value or
// a tombstone, and the revision of the key's previous live version (for the
// PrevKV of watch events read back from history).
type record struct {
	kv      KeyValue // ModRevision is not stored: it is the record key's main
	tomb    bool
	hasPrev bool
	prev    revision
}

const (
	flagTomb = 1 << iota
	flagPrev
)

// encode appends the encoding of r to dst:
//
//	flags byte | uvarint len(key) | key |
//	[put only] uvarint create | uvarint version |
//	[flagPrev] uvarint prev.main | uvarint prev.sub |
//	[put only] value (the rest)
func (r *record) encode(dst []byte) []byte {
	var flags byte
	if r.tomb {
		flags |= flagTomb
	}
	if r.hasPrev {
		flags |= flagPrev
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(r.kv.Key)))
	dst = append(dst, r.kv.Key...)
	if !r.tomb {
		dst = binary.AppendUvarint(dst, uint64(r.kv.CreateRevision))
		dst = binary.AppendUvarint(dst, uint64(r.kv.Version))
	}
	if r.hasPrev {
		dst = binary.AppendUvarint(dst, uint64(r.prev.main))
		dst = binary.AppendUvarint(dst, uint64(uint32(r.prev.sub)))
	}
	if !r.tomb {
		dst = append(dst, r.kv.Value...)
	}
	return dst
}

// decodeRecord decodes the record stored under rev. With keyOnly it skips the
// value (and leaves it empty). It never panics on malformed input.
func decodeRecord(rev revision, b []byte, keyOnly bool) (record, error) {
	var r record
	bad := func(what string) (record, error) {
		return record{}, fmt.Errorf("%w: record %d.%d: %s", ErrCorrupt, rev.main, rev.sub, what)
	}
	if len(b) < 1 {
		return bad("empty")
	}
	flags := b[0]
	if flags&^(flagTomb|flagPrev) != 0 {
		return bad("unknown flags")
	}
	b = b[1:]
	r.tomb, r.hasPrev = flags&flagTomb != 0, flags&flagPrev != 0
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return bad("bad key length")
	}
	b = b[w:]
	r.kv.Key = string(b[:n])
	b = b[n:]
	r.kv.ModRevision = rev.main
	if !r.tomb {
		var c, v uint64
		if c, w = binary.Uvarint(b); w <= 0 {
			return bad("bad create revision")
		}
		b = b[w:]
		if v, w = binary.Uvarint(b); w <= 0 {
			return bad("bad version")
		}
		b = b[w:]
		r.kv.CreateRevision, r.kv.Version = int64(c), int64(v)
	}
	if r.hasPrev {
		var m, s uint64
		if m, w = binary.Uvarint(b); w <= 0 {
			return bad("bad previous revision")
		}
		b = b[w:]
		if s, w = binary.Uvarint(b); w <= 0 || s > 0xffffffff {
			return bad("bad previous sub-revision")
		}
		b = b[w:]
		r.prev = revision{main: int64(m), sub: int32(uint32(s))}
	}
	if r.tomb {
		if len(b) != 0 {
			return bad("trailing bytes after a tombstone")
		}
	} else if !keyOnly {
		r.kv.Value = string(b)
	}
	return r, nil
}

// event turns the record into the event it committed (without PrevKV).
func (r *record) event() Event {
	if r.tomb {
		return Event{Type: Delete, KV: KeyValue{Key: r.kv.Key, ModRevision: r.kv.ModRevision}}
	}
	return Event{Type: Put, KV: r.kv}
}
