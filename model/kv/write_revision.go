package kv

import (
	"fmt"

	"github.com/watchspec/watchspec/model/spec"
)

// CheckWriteRevision decides docs/SPEC.md §2.6 WriteRevision for one
// successful request: every write it made must be in h's commit at the
// response's header revision. A put must appear there as a PUT of its key with
// its value; a delete that removed n keys must appear as n DELETE events in
// its range; a transaction's chosen branch must appear op by op. Reads,
// compactions, failed requests and deletes that removed nothing make no claim
// and pass.
//
// When written values are unique, a put found at another revision is named in
// the violation, which is what a checker of a recorded trace needs to point at
// the culprit.
func CheckWriteRevision(h *History, req Request, resp Response) []spec.Violation {
	if resp.Err != nil {
		return nil
	}
	var puts []PutRequest
	var dels []deleted
	switch {
	case req.Put != nil:
		puts = append(puts, *req.Put)
	case req.Delete != nil && resp.Delete != nil:
		dels = append(dels, deleted{*req.Delete, resp.Delete.Deleted})
	case req.Txn != nil && resp.Txn != nil:
		ops := req.Txn.Failure
		if resp.Txn.Succeeded {
			ops = req.Txn.Success
		}
		for i, op := range ops {
			switch {
			case op.Put != nil:
				puts = append(puts, *op.Put)
			case op.Delete != nil && i < len(resp.Txn.Responses) && resp.Txn.Responses[i].Delete != nil:
				dels = append(dels, deleted{*op.Delete, resp.Txn.Responses[i].Delete.Deleted})
			}
		}
	}
	if len(puts) == 0 && countDeleted(dels) == 0 {
		return nil
	}
	rev := resp.Revision
	c, _ := h.Commit(rev)
	var out []spec.Violation
	for _, p := range puts {
		if hasPut(c, p) {
			continue
		}
		v := spec.Violation{Property: spec.WriteRevision, Revisions: []int64{rev}, Keys: []string{p.Key}}
		if at := h.FindPut(p.Key, p.Value); len(at) > 0 {
			v.Revisions = append(v.Revisions, at...)
			v.Message = fmt.Sprintf("put of %q answered revision %d but was committed at revision %d", p.Key, rev, at[0])
		} else {
			v.Message = fmt.Sprintf("put of %q answered revision %d, whose commit holds no such put", p.Key, rev)
		}
		out = append(out, v)
	}
	for _, d := range dels {
		if d.n == 0 {
			continue
		}
		var n int64
		for _, e := range c.Events {
			if e.Type == Delete && InRange(d.req.Key, d.req.RangeEnd, e.KV.Key) {
				n++
			}
		}
		if n != d.n {
			out = append(out, spec.Violation{Property: spec.WriteRevision, Revisions: []int64{rev}, Keys: []string{d.req.Key},
				Message: fmt.Sprintf("delete of %s answered revision %d with %d keys deleted, but that commit deletes %d keys in its range",
					describeRange(d.req.Key, d.req.RangeEnd), rev, d.n, n)})
		}
	}
	return out
}

type deleted struct {
	req DeleteRequest
	n   int64
}

func countDeleted(ds []deleted) int64 {
	var n int64
	for _, d := range ds {
		n += d.n
	}
	return n
}

func hasPut(c Commit, p PutRequest) bool {
	for _, e := range c.Events {
		if e.Type == Put && e.KV.Key == p.Key && e.KV.Value == p.Value {
			return true
		}
	}
	return false
}

// describeRange renders a key range for messages.
func describeRange(key, rangeEnd string) string {
	switch rangeEnd {
	case "":
		return fmt.Sprintf("%q", key)
	case "\x00":
		return fmt.Sprintf("[%q, ∞)", key)
	}
	return fmt.Sprintf("[%q, %q)", key, rangeEnd)
}
