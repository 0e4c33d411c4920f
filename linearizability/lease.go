package linearizability

import (
	"fmt"
	"math"
	"slices"
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
func leaseHistory(t *traces.Trace, ds []*serverDeletion, placed []lease.Deletion) lease.History {
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
	h.Deletions = append(h.Deletions, placed...)
	return h
}

// checkLeases runs lease.Check on t's lease history — with the deletions
// the linearization placed (placedDeletions) — and records its verdicts in
// res.
func (res *Result) checkLeases(t *traces.Trace, ds []*serverDeletion, placed []lease.Deletion) {
	h := leaseHistory(t, ds, placed)
	revs := map[int64]bool{}
	for _, d := range placed {
		revs[d.Revision] = true
	}
	res.Checks[spec.LeaseAttach] += len(h.Attaches)
	res.Checks[spec.LeaseDeletes] += len(h.Deletions)
	res.Checks[spec.LeaseAtomic] += len(ds) + len(revs)
	res.Checks[spec.LeaseExpiry] += len(ds) + len(revs)
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

// The server's deletions that no watch showed (docs/SPEC.md §2.9, §2.11,
// §3.15). A lease whose keys a revocation or expiry deleted, where no
// watch delivered the DELETE events, still changed the store: a read finds
// the keys gone, or a header revision that no client write created. Every
// lease that has or may have attached keys, and whose deletion no watch
// showed, gets one operation to linearize, kv.LeaseRevokeRequest — delete
// every key whose current version carries the lease, at one revision, or
// nothing when none does:
//
//   - for each revoke of the lease a client saw acknowledged: an operation
//     in the revoke's interval that must take effect. Its header revision
//     is not compared (Output.AnyRevision): the lease side of a trace is
//     recorded apart from the key-value side, and a checker that demanded
//     it would tie §2.7 to how a server reads it;
//   - otherwise (the lease expired, or a revoke's outcome is unknown or
//     "not found"): one operation of unknown outcome, from the lease's
//     grant (or its first attach) on; it may take effect, or not at all.
//     When a read found one of its keys gone that nothing else could have
//     removed (readsSeeGone), it took effect before that read returned.
//     When a client saw the lease gone (§2.11's sightings: a keep-alive
//     answered TTL 0, a time-to-live −1, a revoke or a put refused "lease
//     not found"), the deletion, if any, came before the first such
//     sighting returned: etcd deletes a lease's keys and the lease in one
//     backend transaction (lessor.Revoke), so the operation's return is
//     that sighting's. "Not at all" stays allowed, so a server that keeps
//     the keys of a lease it answers gone is §2.11's to judge, not §2.7's.
//
// A lease that never had a key attached needs no operation (its deletion
// changes nothing), nor one whose deletion a watch showed (serverOps
// linearizes that at its revision).

// leaseEnd is what the revision-order stage knows of one such operation.
type leaseEnd struct {
	lease int64
	// hint is the header an acknowledged revoke was answered with (0: not
	// recorded). etcd (apply.applierV3backend.LeaseRevoke reads it right
	// after applying) and the reference server answer the revision after
	// the revocation: the revision it created, when it deleted keys.
	hint int64
	// expected is when the deletion most likely took effect: a revoke's
	// call; for an expiry, the earliest time §2.11 allows (the latest
	// acknowledged grant or keep-alive's call plus its TTL), or the first
	// revoke's call if earlier.
	expected int64
	// attached is the lowest revision a successful put attached a key to
	// the lease at (0 when only puts of unknown outcome may have).
	attached int64
}

// serverLeaseOps returns the operations of the server's lease deletions
// that no watch showed, with what the revision-order stage knows of each.
// clientBase numbers their (negative) clients.
func serverLeaseOps(t *traces.Trace, ds []*serverDeletion, clientBase int) ([]traces.Op, []leaseEnd) {
	shown := map[int64]bool{}
	for _, d := range ds {
		for _, l := range d.leases {
			shown[l] = true
		}
	}
	type attach struct {
		call, rev int64
		line      int
	}
	attached := map[int64]*attach{}
	for _, o := range t.Ops {
		if o.Response != nil && !wrote(o) {
			continue
		}
		for _, p := range puts(o.Request) {
			if p.Lease == 0 || shown[p.Lease] {
				continue
			}
			a := attached[p.Lease]
			if a == nil {
				a = &attach{call: o.Call, line: o.Line}
				attached[p.Lease] = a
			}
			if o.Call < a.call {
				a.call, a.line = o.Call, o.Line
			}
			if o.Response != nil && (a.rev == 0 || o.Response.Revision < a.rev) {
				a.rev = o.Response.Revision
			}
		}
	}
	if len(attached) == 0 {
		return nil, nil
	}
	type life struct {
		grant, grantLine       int
		granted                bool
		grantCall, firstRevoke int64
		legal, gone            int64
		acked                  []traces.LeaseOp
	}
	lives := map[int64]*life{}
	get := func(l int64) *life {
		if lives[l] == nil {
			lives[l] = &life{firstRevoke: math.MaxInt64, gone: math.MaxInt64}
		}
		return lives[l]
	}
	for _, o := range t.LeaseOps {
		r := o.Response
		switch q := o.Request; {
		case q.Grant != nil:
			id := q.Grant.ID
			if r != nil && r.Err == nil {
				id = r.ID
			} else if r != nil || id == 0 {
				continue
			}
			lf := get(id)
			if !lf.granted || o.Call < lf.grantCall {
				lf.granted, lf.grantCall, lf.grantLine = true, o.Call, o.Line
			}
			if r != nil && r.TTL > 0 {
				lf.legal = max(lf.legal, o.Call+r.TTL*1e9)
			}
		case q.KeepAlive != nil:
			lf := get(q.KeepAlive.ID)
			switch {
			case r == nil || r.Err != nil:
			case r.TTL > 0:
				lf.legal = max(lf.legal, o.Call+r.TTL*1e9)
			default:
				lf.gone = min(lf.gone, o.Return)
			}
		case q.TimeToLive != nil:
			if r != nil && r.Err == nil && r.TTL == -1 {
				get(q.TimeToLive.ID).gone = min(get(q.TimeToLive.ID).gone, o.Return)
			}
		case q.Revoke != nil:
			lf := get(q.Revoke.ID)
			lf.firstRevoke = min(lf.firstRevoke, o.Call)
			switch {
			case r == nil:
			case r.Err == nil:
				lf.acked = append(lf.acked, o)
			case r.Err.Error() == lease.ErrNotFound.Error():
				lf.gone = min(lf.gone, o.Return)
			}
		}
	}
	for _, o := range t.Ops {
		if l, _, ok := refusedLease(o); ok {
			get(l).gone = min(get(l).gone, o.Return)
		}
	}
	seenGone := readsSeeGone(t, ds)
	ids := make([]int64, 0, len(attached))
	for l := range attached {
		ids = append(ids, l)
	}
	slices.Sort(ids)
	var ops []traces.Op
	var ends []leaseEnd
	add := func(o traces.Op, e leaseEnd) {
		o.Client = clientBase - len(ops)
		ops, ends = append(ops, o), append(ends, e)
	}
	for _, l := range ids {
		a, lf := attached[l], get(l)
		req := kv.Request{LeaseRevoke: &kv.LeaseRevokeRequest{Lease: l}}
		if len(lf.acked) > 0 {
			for _, rv := range lf.acked {
				add(traces.Op{Line: rv.Line, Call: rv.Call, Return: rv.Return, Request: req,
					Response: &kv.Response{LeaseRevoke: &kv.LeaseRevokeResponse{}}},
					leaseEnd{lease: l, hint: rv.Response.Revision, expected: rv.Call, attached: a.rev})
			}
			continue
		}
		call, line := a.call, a.line
		if lf.granted && lf.grantCall < call {
			call, line = lf.grantCall, lf.grantLine
		}
		expected := max(lf.legal, call)
		ret := lf.gone
		if b, ok := seenGone[l]; ok {
			ret = min(ret, b)
		}
		add(traces.Op{Line: line, Call: call, Return: ret, Request: req},
			leaseEnd{lease: l, expected: min(expected, lf.firstRevoke), attached: a.rev})
	}
	return ops, ends
}

// readsSeeGone returns, for each lease, the earliest return of a read that
// found gone a key whose version was put with the lease and that nothing
// but the lease's deletion can have removed: the read (a range without
// limit or count-only, of known answer) covers the key at a revision R
// above the put's m and below the key's next known write, no client write
// of unknown outcome may touch the key, and no deletion a watch showed
// removed it in (m, R]. Every linearization then has the lease's deletion
// before that read — a bound that spares porcupine's search the operations
// of unknown outcome that would otherwise stay open to the end.
func readsSeeGone(t *traces.Trace, ds []*serverDeletion) map[int64]int64 {
	type write struct {
		rev, lease int64
		put        bool
	}
	writes := map[string][]write{} // known writes of single keys, by revision
	var rangeDeletes []struct {
		d   kv.DeleteRequest
		rev int64
	}
	touched := map[string]bool{} // keys an unknown write may touch
	var unknownDeletes []kv.DeleteRequest
	for _, o := range t.Ops {
		r := o.Response
		if r == nil {
			ps, dels := writesOf(o.Request)
			for _, p := range ps {
				touched[p.Key] = true
			}
			unknownDeletes = append(unknownDeletes, dels...)
			continue
		}
		if r.Err != nil {
			continue
		}
		ops := []kv.Op{{Put: o.Request.Put, Delete: o.Request.Delete}}
		if q := o.Request.Txn; q != nil && r.Txn != nil {
			ops = q.Failure
			if r.Txn.Succeeded {
				ops = q.Success
			}
		}
		for _, x := range ops {
			switch {
			case x.Put != nil:
				writes[x.Put.Key] = append(writes[x.Put.Key], write{r.Revision, x.Put.Lease, true})
			case x.Delete != nil && x.Delete.RangeEnd == "":
				writes[x.Delete.Key] = append(writes[x.Delete.Key], write{rev: r.Revision})
			case x.Delete != nil:
				rangeDeletes = append(rangeDeletes, struct {
					d   kv.DeleteRequest
					rev int64
				}{*x.Delete, r.Revision})
			}
		}
	}
	for _, d := range ds {
		for _, k := range d.keys {
			writes[k] = append(writes[k], write{rev: d.rev})
		}
	}
	var keys []string
	for k, ws := range writes {
		if touched[k] || mayDelete(unknownDeletes, k) {
			continue
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i].rev < ws[j].rev })
		for _, w := range ws {
			if w.put && w.lease != 0 {
				keys = append(keys, k)
				break
			}
		}
	}
	sort.Strings(keys)
	out := map[int64]int64{}
	for _, o := range t.Ops {
		q, r := o.Request.Range, o.Response
		if q == nil || r == nil || r.Err != nil || r.Range == nil || q.Limit > 0 || q.CountOnly || o.Serializable {
			continue
		}
		at := q.Revision
		if at <= 0 {
			at = r.Revision
		}
		present := map[string]bool{}
		for _, x := range r.Range.KVs {
			present[x.Key] = true
		}
		for i := sort.SearchStrings(keys, q.Key); i < len(keys) && kv.InRange(q.Key, q.RangeEnd, keys[i]); i++ {
			k := keys[i]
			if present[k] {
				continue
			}
			// The last known write of k at or below at: a put with a
			// lease, and none in (m, at] deleted k otherwise.
			ws := writes[k]
			j := sort.Search(len(ws), func(j int) bool { return ws[j].rev > at }) - 1
			if j < 0 || !ws[j].put || ws[j].lease == 0 {
				continue
			}
			m := ws[j].rev
			cleared := false
			for _, rd := range rangeDeletes {
				if rd.rev > m && rd.rev <= at && kv.InRange(rd.d.Key, rd.d.RangeEnd, k) {
					cleared = true
					break
				}
			}
			if cleared {
				continue
			}
			if b, ok := out[ws[j].lease]; !ok || o.Return < b {
				out[ws[j].lease] = o.Return
			}
		}
	}
	return out
}

// placedDeletions lists the deletions the linearization gave the server's
// lease operations: the DELETE events, in the committed history h, of
// keys whose deleted version carried one of those leases, at a revision no
// client write created, each observed — for §2.11 — when the first
// operation whose answer carried that revision or a later one returned.
// A key that a client delete of unknown outcome may have removed is left
// out: the deletion may have been the client's.
func placedDeletions(t *traces.Trace, ops []*op, h *kv.History, ends map[*traces.Op]leaseEnd) []lease.Deletion {
	if h == nil || len(ends) == 0 {
		return nil
	}
	leases := map[int64]bool{}
	for _, e := range ends {
		leases[e.lease] = true
	}
	explained := map[int64]bool{}
	var known []*op
	for _, p := range ops {
		if p.t.Request.LeaseRevoke != nil {
			continue
		}
		if rev, ok := createdRevision(p.out.Response); ok {
			explained[rev] = true
		}
		if p.out.Pinned > 0 {
			explained[p.out.Pinned] = true
		}
		if r := p.out.Response; r != nil && r.Err == nil && !p.out.AnyRevision && r.Revision > 0 {
			known = append(known, p)
		}
	}
	sort.Slice(known, func(i, j int) bool { return known[i].out.Response.Revision < known[j].out.Response.Revision })
	first := make([]*op, len(known)+1) // first[i]: the earliest return among known[i:]
	for i := len(known) - 1; i >= 0; i-- {
		first[i] = known[i]
		if f := first[i+1]; f != nil && f.ret < known[i].ret {
			first[i] = f
		}
	}
	var unknownDeletes []kv.DeleteRequest
	for _, o := range t.Ops {
		if o.Response == nil {
			_, ds := writesOf(o.Request)
			unknownDeletes = append(unknownDeletes, ds...)
		}
	}
	var out []lease.Deletion
	for _, c := range h.Commits() {
		if explained[c.Revision] {
			continue
		}
		i := sort.Search(len(known), func(i int) bool { return known[i].out.Response.Revision >= c.Revision })
		seen := first[i]
		if seen == nil {
			continue // no client saw it: nothing to judge
		}
		for _, e := range c.Events {
			if e.Type != kv.Delete || e.PrevKV == nil || !leases[e.PrevKV.Lease] || mayDelete(unknownDeletes, e.KV.Key) {
				continue
			}
			out = append(out, lease.Deletion{Where: where(seen.t), Key: e.KV.Key, Revision: c.Revision, Lease: e.PrevKV.Lease, Observed: seen.ret})
		}
	}
	return out
}
