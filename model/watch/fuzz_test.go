package watch_test

import (
	"testing"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// byteSource reads small numbers from fuzz input; past the end it reads zeros.
type byteSource struct{ b []byte }

func (s *byteSource) next() int {
	if len(s.b) == 0 {
		return 0
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v
}

func (s *byteSource) key() string {
	return []string{"a", "a/1", "b", "", "\x00", "\xff"}[s.next()%6]
}

// rev returns revisions around the interesting range, negative and huge ones included.
func (s *byteSource) rev() int64 {
	v := s.next()
	switch v {
	case 255:
		return 1 << 62
	case 254:
		return -1 << 62
	}
	return int64(v%24) - 2
}

// FuzzValidator: whatever a server sends, and whatever history it is checked
// against, the validator returns violations; it never panics.
func FuzzValidator(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{5, 0, 1, 0, 2, 1, 3, 2, 0, 1, 1, 2, 3, 4, 5})
	f.Add([]byte{9, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1, 4, 0, 1, 2, 0, 2, 3, 4, 1, 2, 5, 0, 6, 255, 254})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		var s kv.State
		h := &kv.History{}
		for i, n := 0, src.next()%16; i < n; i++ {
			var req kv.Request
			switch src.next() % 4 {
			case 0:
				req.Delete = &kv.DeleteRequest{Key: src.key(), RangeEnd: src.key()}
			case 1:
				req.Compact = &kv.CompactRequest{Revision: src.rev()}
			case 2:
				req.Txn = &kv.TxnRequest{Success: []kv.Op{{Put: &kv.PutRequest{Key: src.key(), Value: "t"}}, {Delete: &kv.DeleteRequest{Key: src.key()}}}}
			default:
				req.Put = &kv.PutRequest{Key: src.key(), Value: string(rune('a' + i))}
			}
			var resp kv.Response
			s, resp = kv.Step(s, req)
			if resp.Err != nil {
				continue
			}
			if req.Compact != nil {
				_ = h.Compact(req.Compact.Revision)
			} else if c, ok := s.LastCommit(); ok && c.Revision > h.Head() {
				if err := h.Append(c); err != nil {
					t.Fatal(err)
				}
			}
		}
		flags := src.next()
		req := watch.Request{Key: src.key(), RangeEnd: src.key(), StartRevision: src.rev(),
			NoPut: flags&1 != 0, NoDelete: flags&2 != 0, PrevKV: flags&4 != 0, ProgressNotify: flags&8 != 0}
		_ = watch.Canonical(h, req, s.Revision())
		v := watch.NewValidator(h, req)
		for len(src.b) > 0 {
			kind := src.next()
			r := watch.Response{Revision: src.rev(), Created: kind&1 != 0, Canceled: kind&2 != 0}
			if kind&4 != 0 {
				r.CompactRevision = src.rev()
			}
			for j, n := 0, src.next()%4; j < n; j++ {
				e := kv.Event{Type: kv.EventType(src.next() % 3), KV: kv.KeyValue{Key: src.key(), Value: "x",
					CreateRevision: src.rev(), ModRevision: src.rev(), Version: src.rev()}}
				if src.next()%2 == 0 {
					e.PrevKV = &kv.KeyValue{Key: e.KV.Key, ModRevision: src.rev()}
				}
				r.Events = append(r.Events, e)
			}
			for _, viol := range v.Observe(r) {
				if viol.Property == "" || viol.Message == "" {
					t.Fatalf("violation without property or message: %+v", viol)
				}
			}
		}
		_ = v.Checks()
	})
}
