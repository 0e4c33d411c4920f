package kv

// SameResponse reports whether a and b are the same response: same header
// revision, same error (by text, see [SameError]) and the same contents,
// element by element. Checkers use it to match a recorded response with the
// model's.
func SameResponse(a, b Response) bool {
	return a.Revision == b.Revision && SameError(a.Err, b.Err) &&
		sameRange(a.Range, b.Range) && samePut(a.Put, b.Put) && sameDelete(a.Delete, b.Delete) &&
		sameTxn(a.Txn, b.Txn) && (a.Compact == nil) == (b.Compact == nil) && (a.LeaseRevoke == nil) == (b.LeaseRevoke == nil)
}

func sameRange(a, b *RangeResponse) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.More == b.More && a.Count == b.Count && sameKVs(a.KVs, b.KVs)
}

func samePut(a, b *PutResponse) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameKVPtr(a.PrevKV, b.PrevKV)
}

func sameDelete(a, b *DeleteResponse) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Deleted == b.Deleted && sameKVs(a.PrevKVs, b.PrevKVs)
}

func sameTxn(a, b *TxnResponse) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Succeeded != b.Succeeded || len(a.Responses) != len(b.Responses) {
		return false
	}
	for i := range a.Responses {
		x, y := a.Responses[i], b.Responses[i]
		if !sameRange(x.Range, y.Range) || !samePut(x.Put, y.Put) || !sameDelete(x.Delete, y.Delete) {
			return false
		}
	}
	return true
}

func sameKVs(a, b []KeyValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameKVPtr(a, b *KeyValue) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Answers reports whether recorded is an answer the specification allows
// where the model answered model, for the same request: [SameResponse],
// except that a successful compaction may carry any header revision at or
// above the model's. etcd sets a compaction's header after applying it, to
// the revision current then (server/etcdserver/v3_server.go, Compact), and
// writes applied meanwhile raise it; docs/SPEC.md §2.4.
func Answers(model, recorded Response) bool {
	if model.Compact != nil && recorded.Compact != nil && model.Err == nil && recorded.Err == nil &&
		recorded.Revision > model.Revision {
		model.Revision = recorded.Revision
	}
	return SameResponse(model, recorded)
}
