package mvcc

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
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
	last    bool // the last record of its revision (so that a lost one is seen)
}

const (
	flagTomb = 1 << iota
	flagPrev
	flagLast  // the last record of its revision
	flagLease // a put with a lease: a varint lease ID follows the version
)

// castagnoli is the CRC-32C table: every record and log frame carries a
// CRC-32C (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealLen is the length of the checksum that starts every stored record.
const sealLen = 4

// seal encodes r as it is stored, under the record key key:
//
//	crc32c(key | body) (4 bytes, big-endian) | body
//
// where body is [record.encode]'s. The checksum covers the key too, so that
// a record read back under another key does not verify.
func (r *record) seal(key []byte) []byte {
	b := r.encode(make([]byte, sealLen, sealLen+32+len(r.kv.Key)+len(r.kv.Value)))
	reseal(key, b)
	return b
}

// reseal recomputes the checksum of a sealed value whose body changed.
func reseal(key, sealed []byte) {
	c := crc32.Update(0, castagnoli, key)
	c = crc32.Update(c, castagnoli, sealed[sealLen:])
	binary.BigEndian.PutUint32(sealed, c)
}

// unseal returns the body of a sealed value, or false when the checksum does
// not match (the value, or the key it was read under, is damaged).
func unseal(key, sealed []byte) ([]byte, bool) {
	if len(sealed) < sealLen {
		return nil, false
	}
	c := crc32.Update(0, castagnoli, key)
	c = crc32.Update(c, castagnoli, sealed[sealLen:])
	return sealed[sealLen:], c == binary.BigEndian.Uint32(sealed)
}

// setLast marks the sealed record as the last of its revision.
func setLast(key, sealed []byte) {
	sealed[sealLen] |= flagLast
	reseal(key, sealed)
}

// openRecord verifies and decodes the sealed record stored under r.
func openRecord(r revision, sealed []byte, keyOnly bool) (record, error) {
	body, ok := unseal(revKey(r), sealed)
	if !ok {
		return record{}, fmt.Errorf("%w: record %d.%d fails its checksum", ErrCorrupt, r.main, r.sub)
	}
	return decodeRecord(r, body, keyOnly)
}

// encode appends the encoding of r to dst:
//
//	flags byte | uvarint len(key) | key |
//	[put only] uvarint create | uvarint version |
//	[flagLease] varint lease |
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
	if r.last {
		flags |= flagLast
	}
	if !r.tomb && r.kv.Lease != 0 {
		flags |= flagLease
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(r.kv.Key)))
	dst = append(dst, r.kv.Key...)
	if !r.tomb {
		dst = binary.AppendUvarint(dst, uint64(r.kv.CreateRevision))
		dst = binary.AppendUvarint(dst, uint64(r.kv.Version))
		if r.kv.Lease != 0 {
			dst = binary.AppendVarint(dst, r.kv.Lease)
		}
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
	if flags&^(flagTomb|flagPrev|flagLast|flagLease) != 0 {
		return bad("unknown flags")
	}
	if flags&flagTomb != 0 && flags&flagLease != 0 {
		return bad("a tombstone with a lease")
	}
	b = b[1:]
	r.tomb, r.hasPrev, r.last = flags&flagTomb != 0, flags&flagPrev != 0, flags&flagLast != 0
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
		if r.kv.CreateRevision < 1 || r.kv.CreateRevision > rev.main || r.kv.Version < 1 {
			return bad("bad create revision or version")
		}
		if flags&flagLease != 0 {
			l, w := binary.Varint(b)
			if w <= 0 || l == 0 {
				return bad("bad lease")
			}
			b = b[w:]
			r.kv.Lease = l
		}
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
		if r.prev.main >= rev.main || r.prev.main < 1 {
			return bad("previous revision out of order")
		}
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
