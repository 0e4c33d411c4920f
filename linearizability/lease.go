package linearizability

import (
	"fmt"
	"sort"
	"strings"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// The lease stage (docs/SPEC.md §2.9–§2.11, §3.14, §3.15). A trace that
// uses leases — it holds lease records, or a put that names a lease —
// widens §2.7's closed world: a DELETE that a watch delivered at a
// revision no recorded client write created is the server's own, and the
// checker adds it to the operations it linearizes as one write deleting
// all the keys deleted at that revision (known to have happened between the
// start and the response that delivered it). lease.Check then says
// whether a lease explains each such deletion, whether it came too early,
// and whether a lease's keys went at one revision. A trace that does not
// use leases keeps the closed world: every delete is a client's.

// usesLeases reports whether t holds lease operations or a put with a lease.
func usesLeases(t *traces.Trace) bool {
	if len(t.LeaseOps) > 0 {
		return true
	}
	for _, o := range t.Ops {
		for _, p := range puts(o.Request) {
			if p.Lease != 0 {
				return true
			}
		}
	}
	return false
}

// leaseNotFound is etcd's answer to a put naming a lease it does not know.
var leaseNotFound = lease.ErrNotFound

// withoutLeaseRefusals drops the operations that named a lease and were
// refused with "requested lease not found": they changed nothing, and
// kv.Step, which knows no leases, would not answer so. (Whether the lease
// was indeed gone is lease.Check's question, §2.11: a lease surely live —
// acknowledged, unrevoked, within its TTL — must not be refused.)
func withoutLeaseRefusals(ops []traces.Op) []traces.Op {
	out := ops[:0:0]
	for _, o := range ops {
		if o.Response != nil && o.Response.Err != nil && o.Response.Err.Error() == leaseNotFound.Error() {
			continue
		}
		out = append(out, o)
	}
	return out
}

// wrote reports whether a known-outcome operation surely created the
// revision of its response: a put, a delete that removed keys, a
// transaction whose branch did either.
func wrote(o traces.Op) bool {
	r := o.Response
	if r == nil || r.Err != nil {
		return false
	}
	switch {
	case r.Put != nil:
		return true
	case r.Delete != nil:
		return r.Delete.Deleted > 0
	case r.Txn != nil:
		for _, x := range r.Txn.Responses {
			if x.Put != nil || x.Delete != nil && x.Delete.Deleted > 0 {
				return true
			}
		}
	}
	return false
}

// serverDeletion is one server-made revision: the keys a watch saw deleted
// at it, with their leases and where they were first seen.
type serverDeletion struct {
	rev      int64
	keys     []string
	leases   map[string]int64
	observed int64
	line     int
	// where is the watch response that first delivered it, as the watch
	// stage names one.
	where string
}

// findServerDeletions lists the revisions of DELETE events that no recorded
// client write created and no client write of unknown outcome may have.
func findServerDeletions(t *traces.Trace) []*serverDeletion {
	clientRevs := map[int64]bool{}
	var unknownDeletes []kv.DeleteRequest
	for _, o := range t.Ops {
		if wrote(o) {
			clientRevs[o.Response.Revision] = true
		}
		if o.Response == nil {
			_, ds := writesOf(o.Request)
			unknownDeletes = append(unknownDeletes, ds...)
		}
	}
	byRev := map[int64]*serverDeletion{}
	lastPut := lastPutLeases(t)
	for _, w := range t.Watches {
		for _, wr := range w.Responses {
			for _, e := range wr.Response.Events {
				r := e.Revision()
				if e.Type != kv.Delete || clientRevs[r] || mayDelete(unknownDeletes, e.KV.Key) {
					continue
				}
				d := byRev[r]
				if d == nil {
					d = &serverDeletion{rev: r, leases: map[string]int64{}, observed: wr.Time + 1}
					byRev[r] = d
				}
				if wr.Time < d.observed {
					d.observed, d.line = wr.Time, wr.Line
					d.where = fmt.Sprintf("watch %d of client %d (line %d), response at line %d", w.ID, w.Client, w.Line, wr.Line)
				}
				if _, ok := d.leases[e.KV.Key]; !ok {
					d.keys = append(d.keys, e.KV.Key)
					d.leases[e.KV.Key] = lastPut(e.KV.Key, r)
				}
				if e.PrevKV != nil {
					d.leases[e.KV.Key] = e.PrevKV.Lease
				}
			}
		}
	}
	out := make([]*serverDeletion, 0, len(byRev))
	for _, d := range byRev {
		sort.Strings(d.keys)
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rev < out[j].rev })
	return out
}

func mayDelete(ds []kv.DeleteRequest, key string) bool {
	for _, d := range ds {
		if kv.InRange(d.Key, d.RangeEnd, key) {
			return true
		}
	}
	return false
}

// lastPutLeases returns a function giving the lease of the last PUT of a
// key below a revision, from what watches delivered and from the puts of
// known revision (0 when none is known).
func lastPutLeases(t *traces.Trace) func(key string, below int64) int64 {
	type put struct{ rev, lease int64 }
	seen := map[string][]put{}
	for _, w := range t.Watches {
		for _, wr := range w.Responses {
			for _, e := range wr.Response.Events {
				if e.Type == kv.Put {
					seen[e.KV.Key] = append(seen[e.KV.Key], put{e.Revision(), e.KV.Lease})
				}
			}
		}
	}
	for _, o := range t.Ops {
		if !wrote(o) {
			continue
		}
		for _, p := range puts(o.Request) {
			seen[p.Key] = append(seen[p.Key], put{o.Response.Revision, p.Lease})
		}
	}
	return func(key string, below int64) int64 {
		var best put
		for _, p := range seen[key] {
			if p.rev < below && p.rev > best.rev {
				best = p
			}
		}
		return best.lease
	}
}

// serverOps turns server-made deletions into operations to linearize: one
// transaction per revision that deletes its keys, answered as the watches
// showed, called at 0 and returned when first seen.
func serverOps(ds []*serverDeletion) []traces.Op {
	var out []traces.Op
	for i, d := range ds {
		txn := &kv.TxnRequest{}
		resp := &kv.TxnResponse{Succeeded: true}
		for _, k := range d.keys {
			txn.Success = append(txn.Success, kv.Op{Delete: &kv.DeleteRequest{Key: k}})
			resp.Responses = append(resp.Responses, kv.OpResponse{Delete: &kv.DeleteResponse{Deleted: 1}})
		}
		out = append(out, traces.Op{Line: d.line, Client: -1 - i, Call: 0, Return: d.observed,
			Request: kv.Request{Txn: txn}, Response: &kv.Response{Revision: d.rev, Txn: resp}})
	}
	return out
}

// refusedLease reports the lease that an operation refused with "requested
// lease not found" named, and the key of a put naming it: only when its
// puts name one lease (a transaction's refusal does not say which of
// several it did not find).
func refusedLease(o traces.Op) (l int64, key string, ok bool) {
	if o.Response == nil || o.Response.Err == nil || o.Response.Err.Error() != leaseNotFound.Error() {
		return 0, "", false
	}
	for _, p := range puts(o.Request) {
		switch {
		case p.Lease == 0:
		case l == 0:
			l, key = p.Lease, p.Key
		case p.Lease != l:
			return 0, "", false
		}
	}
	return l, key, l != 0
}

// leaseHistory is what lease.Check judges in t.
func leaseHistory(t *traces.Trace, ds []*serverDeletion) lease.History {
	var h lease.History
	for _, o := range t.LeaseOps {
		op := lease.Op{Where: fmt.Sprintf("lease op at line %d (client %d)", o.Line, o.Client), Call: o.Call, Return: o.Return, Request: o.Request, Response: o.Response}
		if op.Response != nil && op.Response.Err != nil {
			// Decoded errors are texts; compare them with the model's.
			for _, e := range []error{lease.ErrNotFound, lease.ErrExist, lease.ErrTTLTooLarge} {
				if op.Response.Err.Error() == e.Error() {
					c := *op.Response
					c.Err = e
					op.Response = &c
				}
			}
		}
		h.Ops = append(h.Ops, op)
	}
	for _, o := range t.Ops {
		if l, key, ok := refusedLease(o); ok {
			h.Refused = append(h.Refused, lease.Attach{Where: fmt.Sprintf("op at line %d (client %d)", o.Line, o.Client),
				Key: key, Lease: l, Call: o.Call, Return: o.Return})
		}
		if !wrote(o) {
			continue
		}
		for _, p := range puts(o.Request) {
			if p.Lease != 0 {
				h.Attaches = append(h.Attaches, lease.Attach{Where: fmt.Sprintf("op at line %d (client %d)", o.Line, o.Client),
					Key: p.Key, Lease: p.Lease, Revision: o.Response.Revision, Call: o.Call, Return: o.Return})
			}
		}
	}
	for _, d := range ds {
		for _, k := range d.keys {
			h.Deletions = append(h.Deletions, lease.Deletion{Where: d.where,
				Key: k, Revision: d.rev, Lease: d.leases[k], Observed: d.observed})
		}
	}
	return h
}

// checkLeases runs lease.Check on t's lease history and records its
// verdicts in res.
func (res *Result) checkLeases(t *traces.Trace, ds []*serverDeletion) {
	h := leaseHistory(t, ds)
	res.Checks[spec.LeaseAttach] += len(h.Attaches)
	res.Checks[spec.LeaseDeletes] += len(h.Deletions)
	res.Checks[spec.LeaseAtomic] += len(ds)
	res.Checks[spec.LeaseExpiry] += len(ds)
	for _, v := range lease.Check(h) {
		where := leaseWhere(v.Message)
		if where != "" {
			v.Message = strings.TrimPrefix(v.Message, where+": ")
		}
		res.Violations = append(res.Violations, Violation{Violation: v, Where: where})
	}
}

// leaseWhere takes the location that leaseHistory named and lease.Check
// put at the head of a message ("op at line 12 (client 3): ..."), or ""
// when there is none.
func leaseWhere(msg string) string {
	for _, p := range []string{"op at line ", "lease op at line ", "watch "} {
		if strings.HasPrefix(msg, p) {
			if w, _, ok := strings.Cut(msg, ": "); ok {
				return w
			}
		}
	}
	return ""
}
