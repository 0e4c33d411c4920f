package server

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// Watch events are encoded for the wire once per event, not once per watch
// that delivers them. The hub hands out events in batches shared by every
// response that delivers them (watchhub.Response.Shared): one commit to a
// thousand watches, one window of history to every watch catching up. The
// first stream to send an event of a batch encodes it, as field 11 (events)
// of a WatchResponse — the bytes etcd's own marshalling produces — into the
// batch's wireEvents (kept with the batch, watchhub.Batch.Memo); every
// stream then sends a response's events as one slice of those bytes, which
// become the WatchResponse's unknown fields: gRPC's proto codec copies them
// after the header, so the client decodes ordinary events. A response whose
// events were selected for its watch alone is encoded for itself the same
// way.

// wireEvents is the wire encoding of a batch's first events: event i is
// buf[off[i]:off[i+1]]. It only grows, in order; a slice of it handed out
// stays valid.
type wireEvents struct {
	mu  sync.Mutex
	buf []byte
	off []int32
}

func newWireEvents() any { return &wireEvents{off: []int32{0}} }

// span returns the encoding of events lo..hi-1 of b, encoding what was not
// yet.
func (we *wireEvents) span(b *watchhub.Batch, lo, hi int) []byte {
	we.mu.Lock()
	defer we.mu.Unlock()
	if done := len(we.off) - 1; done < hi {
		evs := b.Events(hi)
		for i := done; i < hi; i++ {
			we.buf = appendEventField(we.buf, &evs[i])
			we.off = append(we.off, int32(len(we.buf)))
		}
	}
	return we.buf[we.off[lo]:we.off[hi]:we.off[hi]]
}

// encodeEvents returns the wire encoding of a response's events, as the
// WatchResponse's field 11: from its batch's shared encoding, or into
// scratch for events of its own.
func encodeEvents(r *watchhub.Response, scratch []byte) []byte {
	if b, at := r.Shared(); b != nil {
		we := b.Memo(newWireEvents).(*wireEvents)
		return we.span(b, at, at+len(r.Events))
	}
	for i := range r.Events {
		scratch = appendEventField(scratch, &r.Events[i])
	}
	return scratch
}

// The field numbers of etcd's messages (api/mvccpb/kv.proto,
// api/etcdserverpb/rpc.proto).
const (
	fieldWatchResponseEvents = 11
	fieldEventType           = 1
	fieldEventKV             = 2
	fieldEventPrevKV         = 3
	fieldKVKey               = 1
	fieldKVCreateRevision    = 2
	fieldKVModRevision       = 3
	fieldKVVersion           = 4
	fieldKVValue             = 5
	fieldKVLease             = 6
)

// appendEventField appends e as one occurrence of WatchResponse field 11:
// an mvccpb.Event with its fields in field order and proto3's defaults
// omitted, byte for byte what proto.Marshal writes for the Event that toPB
// makes (TestWireEncodingIsProtoMarshal).
func appendEventField(b []byte, e *mvcc.Event) []byte {
	kvn := kvSize(&e.KV)
	n := protowire.SizeTag(fieldEventKV) + protowire.SizeBytes(kvn)
	if e.Type == mvcc.Delete {
		n += protowire.SizeTag(fieldEventType) + protowire.SizeVarint(1)
	}
	pn := 0
	if e.PrevKV != nil {
		pn = kvSize(e.PrevKV)
		n += protowire.SizeTag(fieldEventPrevKV) + protowire.SizeBytes(pn)
	}
	b = protowire.AppendTag(b, fieldWatchResponseEvents, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if e.Type == mvcc.Delete {
		b = protowire.AppendTag(b, fieldEventType, protowire.VarintType)
		b = protowire.AppendVarint(b, 1) // mvccpb.DELETE
	}
	b = protowire.AppendTag(b, fieldEventKV, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kvn))
	b = appendKV(b, &e.KV)
	if e.PrevKV != nil {
		b = protowire.AppendTag(b, fieldEventPrevKV, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(pn))
		b = appendKV(b, e.PrevKV)
	}
	return b
}

// kvFields are a KeyValue's varint fields, in field order.
func kvFields(kv *mvcc.KeyValue) [3]struct {
	num protowire.Number
	v   int64
} {
	return [3]struct {
		num protowire.Number
		v   int64
	}{{fieldKVCreateRevision, kv.CreateRevision}, {fieldKVModRevision, kv.ModRevision}, {fieldKVVersion, kv.Version}}
}

func kvSize(kv *mvcc.KeyValue) int {
	n := 0
	if kv.Key != "" {
		n += protowire.SizeTag(fieldKVKey) + protowire.SizeBytes(len(kv.Key))
	}
	for _, f := range kvFields(kv) {
		if f.v != 0 {
			n += protowire.SizeTag(f.num) + protowire.SizeVarint(uint64(f.v))
		}
	}
	if kv.Value != "" {
		n += protowire.SizeTag(fieldKVValue) + protowire.SizeBytes(len(kv.Value))
	}
	if kv.Lease != 0 {
		n += protowire.SizeTag(fieldKVLease) + protowire.SizeVarint(uint64(kv.Lease))
	}
	return n
}

func appendKV(b []byte, kv *mvcc.KeyValue) []byte {
	if kv.Key != "" {
		b = protowire.AppendTag(b, fieldKVKey, protowire.BytesType)
		b = protowire.AppendString(b, kv.Key)
	}
	for _, f := range kvFields(kv) {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.num, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(f.v))
		}
	}
	if kv.Value != "" {
		b = protowire.AppendTag(b, fieldKVValue, protowire.BytesType)
		b = protowire.AppendString(b, kv.Value)
	}
	if kv.Lease != 0 {
		b = protowire.AppendTag(b, fieldKVLease, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(kv.Lease))
	}
	return b
}
