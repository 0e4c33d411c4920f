package conform

// The Kubernetes-shaped workload (Config.Workload = "kubernetes"): only the
// requests the apiserver's etcd3 storage (k8s.io/apiserver/pkg/storage/etcd3,
// through go.etcd.io/etcd/client/v3/kubernetes) sends, so that a store that
// implements no more than that — kine — can be held to the specification.
//
//   - create: a transaction "mod_revision(key) = 0 → put" with no else
//     branch (store.Create, OptimisticPut with expected revision 0);
//   - update: "mod_revision(key) = R → put, else get key" from the state the
//     client last saw (a fresh get, or its cache, possibly stale), retried
//     with the state a failure returns (store.GuaranteedUpdate);
//   - delete: "mod_revision(key) = R → delete key, else get key", likewise
//     (store.GuaranteedDelete, OptimisticDelete);
//   - get: a range of one key with limit 1, now or at a revision;
//   - list: a prefix, whole or in pages (limit, continue from the last key
//     plus "\x00", every page at the first page's revision), now or at a
//     revision (store.GetList); counts (store.Stats) and keys-only lists;
//   - compaction: the transaction on compact_rev_key that records it
//     ("version(compact_rev_key) = V → put the revision, else get"), then a
//     Compact of the revision the previous round saw (etcd3.Compact), and a
//     watch of compact_rev_key (the compactor's watch loop);
//   - watches: list a prefix, then watch it from the list's revision + 1
//     with prevKV and progress notifications (the reflector and the watch
//     cache), resume after the last event or relist, request progress, and
//     sometimes read slowly; after a compaction cancel, relist. Now and then
//     a single object is watched from a get's revision + 1.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces/record"
)

// CompactRevKey is the key the apiserver records its compactions in
// (k8s.io/apiserver/pkg/storage/etcd3/compact.go).
const CompactRevKey = "compact_rev_key"

// checkCompactKeyAbsent refuses a store an apiserver already uses: the
// workload's compactor writes compact_rev_key, as the apiserver does.
func checkCompactKeyAbsent(ctx context.Context, cli *clientv3.Client) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(pctx, CompactRevKey)
	if err != nil {
		return fmt.Errorf("reading %s: %v", CompactRevKey, err)
	}
	if len(resp.Kvs) > 0 {
		return fmt.Errorf("%s exists: the kubernetes workload compacts as the apiserver does and needs a store no apiserver uses", CompactRevKey)
	}
	return nil
}

// kubeCreate is store.Create's transaction.
func kubeCreate(key, value string) kv.Request {
	return kv.Request{Txn: &kv.TxnRequest{
		Compare: []kv.Compare{{Key: key, Target: kv.TargetModRevision, Result: kv.CompareEqual, Number: 0}},
		Success: []kv.Op{{Put: &kv.PutRequest{Key: key, Value: value}}},
	}}
}

// kubeUpdate is OptimisticPut with GetOnFailure.
func kubeUpdate(key, value string, mod int64) kv.Request {
	return kv.Request{Txn: &kv.TxnRequest{
		Compare: []kv.Compare{{Key: key, Target: kv.TargetModRevision, Result: kv.CompareEqual, Number: mod}},
		Success: []kv.Op{{Put: &kv.PutRequest{Key: key, Value: value}}},
		Failure: []kv.Op{{Range: &kv.RangeRequest{Key: key}}},
	}}
}

// kubeDelete is OptimisticDelete with GetOnFailure.
func kubeDelete(key string, mod int64) kv.Request {
	return kv.Request{Txn: &kv.TxnRequest{
		Compare: []kv.Compare{{Key: key, Target: kv.TargetModRevision, Result: kv.CompareEqual, Number: mod}},
		Success: []kv.Op{{Delete: &kv.DeleteRequest{Key: key}}},
		Failure: []kv.Op{{Range: &kv.RangeRequest{Key: key}}},
	}}
}

// kubeCompactTxn is etcd3.Compact's transaction.
func kubeCompactTxn(version, rev int64) kv.Request {
	return kv.Request{Txn: &kv.TxnRequest{
		Compare: []kv.Compare{{Key: CompactRevKey, Target: kv.TargetVersion, Result: kv.CompareEqual, Number: version}},
		Success: []kv.Op{{Put: &kv.PutRequest{Key: CompactRevKey, Value: strconv.FormatInt(rev, 10)}}},
		Failure: []kv.Op{{Range: &kv.RangeRequest{Key: CompactRevKey}}},
	}}
}

// kubeGet is kubernetes.Client.Get.
func kubeGet(key string, rev int64) kv.Request {
	return kv.Request{Range: &kv.RangeRequest{Key: key, Limit: 1, Revision: rev}}
}

// failedRange returns the key-values of a failed transaction's get.
func failedRange(resp kv.Response) ([]kv.KeyValue, bool) {
	if resp.Err != nil || resp.Txn == nil || resp.Txn.Succeeded || len(resp.Txn.Responses) != 1 || resp.Txn.Responses[0].Range == nil {
		return nil, false
	}
	return resp.Txn.Responses[0].Range.KVs, true
}

// prefixes are the "resources" of the run: two, and all of them.
func (r *run) kubePrefix(rng *rand.Rand) string {
	return r.prefix + []string{"a/", "b/", ""}[rng.IntN(3)]
}

// pastRevision picks a revision between the compaction and the head.
func (r *run) pastRevision(rng *rand.Rand) int64 {
	head, low := r.headRev.Load(), r.compactRev.Load()
	return max(1, low-1+rng.Int64N(max(1, head-low+2)))
}

// kubeClient is one apiserver's worth of storage requests.
func (r *run) kubeClient(ctx context.Context, i int) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(i)))
	c := r.rec.Client(cli)
	cache := map[string]int64{} // the mod revision last seen per key, as a watch cache holds it
	for ctx.Err() == nil {
		key := r.keys[rng.IntN(len(r.keys))]
		switch p := rng.IntN(100); {
		case p < 20:
			if resp, err := r.do(ctx, c, kubeCreate(key, r.value(i))); err == nil && resp.Err == nil && resp.Txn.Succeeded {
				cache[key] = resp.Revision
			}
		case p < 45:
			r.guaranteed(ctx, c, rng, cache, key, func(mod int64) kv.Request { return kubeUpdate(key, r.value(i), mod) })
		case p < 57:
			r.guaranteed(ctx, c, rng, cache, key, func(mod int64) kv.Request { return kubeDelete(key, mod) })
		case p < 70:
			rev := int64(0)
			if rng.IntN(4) == 0 {
				rev = r.pastRevision(rng)
			}
			r.do(ctx, c, kubeGet(key, rev))
		case p < 93:
			limit := []int64{0, 1, 2, 3}[rng.IntN(4)]
			rev := int64(0)
			if rng.IntN(4) == 0 {
				rev = r.pastRevision(rng)
			}
			r.kubeList(ctx, c, r.kubePrefix(rng), limit, rev)
		case p < 97:
			sub := r.kubePrefix(rng)
			r.do(ctx, c, kv.Request{Range: &kv.RangeRequest{Key: sub, RangeEnd: kv.PrefixEnd(sub), CountOnly: true}})
		default:
			sub := r.kubePrefix(rng)
			r.do(ctx, c, kv.Request{Range: &kv.RangeRequest{Key: sub, RangeEnd: kv.PrefixEnd(sub), KeysOnly: true}})
		}
	}
	return nil
}

// guaranteed runs store.GuaranteedUpdate's (or GuaranteedDelete's) loop:
// from the cached state (which may be stale) or a fresh get, try the
// transaction; on a conflict, retry from the state the failure returned;
// stop when the key does not exist (NotFound).
func (r *run) guaranteed(ctx context.Context, c *record.Client, rng *rand.Rand, cache map[string]int64, key string, txn func(mod int64) kv.Request) {
	mod, cached := cache[key]
	if !cached || rng.IntN(2) == 0 {
		get, err := r.do(ctx, c, kubeGet(key, 0))
		if err != nil || get.Err != nil {
			return
		}
		if len(get.Range.KVs) == 0 {
			delete(cache, key)
			return
		}
		mod = get.Range.KVs[0].ModRevision
	}
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		resp, err := r.do(ctx, c, txn(mod))
		if err != nil || resp.Err != nil {
			delete(cache, key)
			return
		}
		if resp.Txn.Succeeded {
			if len(resp.Txn.Responses) == 1 && resp.Txn.Responses[0].Delete != nil {
				delete(cache, key)
			} else {
				cache[key] = resp.Revision
			}
			return
		}
		kvs, ok := failedRange(resp)
		if !ok || len(kvs) == 0 {
			delete(cache, key)
			return
		}
		mod = kvs[0].ModRevision
		cache[key] = mod
	}
}

// kubeList lists prefix as store.GetList does, in pages of limit (0: all
// at once), at rev (0: now), and returns the list's revision (0 when it
// failed).
func (r *run) kubeList(ctx context.Context, c *record.Client, prefix string, limit, rev int64) int64 {
	start, end := prefix, kv.PrefixEnd(prefix)
	for page := 0; page < 20 && ctx.Err() == nil; page++ {
		resp, err := r.do(ctx, c, kv.Request{Range: &kv.RangeRequest{Key: start, RangeEnd: end, Limit: limit, Revision: rev}})
		if err != nil || resp.Err != nil {
			return 0
		}
		if rev == 0 {
			rev = resp.Revision
		}
		kvs := resp.Range.KVs
		if int64(len(kvs)) >= resp.Range.Count || len(kvs) == 0 {
			return rev
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
	return rev
}

// kubeCompactor compacts as the apiserver's compactor does: record the
// revision in compact_rev_key if no other apiserver did since, then
// compact to the revision the previous round saw.
func (r *run) kubeCompactor(ctx context.Context) error {
	var version, rev int64
	return r.everyCompactPeriod(ctx, func(c *record.Client) {
		resp, err := r.do(ctx, c, kubeCompactTxn(version, rev))
		if err != nil || resp.Err != nil {
			return
		}
		if !resp.Txn.Succeeded {
			if kvs, ok := failedRange(resp); ok && len(kvs) == 1 {
				version = kvs[0].Version
			}
			rev = resp.Revision
			return
		}
		version++
		if rev > 0 {
			cresp, err := r.do(ctx, c, kv.Request{Compact: &kv.CompactRequest{Revision: rev}})
			if err == nil && cresp.Err == nil {
				r.compactRev.Store(max(r.compactRev.Load(), rev))
				r.stats.compactions.Add(1)
			}
		}
		rev = resp.Revision
	})
}

// compactKeyWatcher is the apiserver compactor's watch loop: get
// compact_rev_key, then watch it from the revision the get saw.
func (r *run) compactKeyWatcher(ctx context.Context) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	c := r.rec.Client(cli)
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 999))
	for ctx.Err() == nil {
		get, err := r.do(ctx, c, kv.Request{Range: &kv.RangeRequest{Key: CompactRevKey}})
		if err != nil || get.Err != nil {
			continue
		}
		req := watch.Request{Key: CompactRevKey, StartRevision: get.Revision}
		r.session(clientv3.WithRequireLeader(ctx), cli, c, rng, req)
	}
	return nil
}

// kubeWatcher is a reflector (or the watch cache): list, then watch from
// the list's revision + 1, resuming after the last event seen, relisting
// now and then and after a compaction cancel.
func (r *run) kubeWatcher(ctx context.Context, i int) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(1000+i)))
	c := r.rec.Client(cli)
	from := int64(0)
	var req watch.Request
	for ctx.Err() == nil {
		if from == 0 || rng.IntN(4) == 0 {
			if rng.IntN(8) == 0 { // a single object: get, then watch the key
				key := r.keys[rng.IntN(len(r.keys))]
				get, err := r.do(ctx, c, kubeGet(key, 0))
				if err != nil || get.Err != nil {
					continue
				}
				req = watch.Request{Key: key}
				from = get.Revision + 1
			} else {
				prefix := r.kubePrefix(rng)
				rev := r.kubeList(ctx, c, prefix, []int64{0, 0, 1, 2}[rng.IntN(4)], 0)
				if rev == 0 {
					continue
				}
				req = watch.Request{Key: prefix, RangeEnd: kv.PrefixEnd(prefix)}
				from = rev + 1
			}
			req.PrevKV, req.ProgressNotify = true, rng.IntN(4) != 0
		}
		req.StartRevision = from
		next, compacted := r.session(clientv3.WithRequireLeader(ctx), cli, c, rng, req)
		if compacted {
			from = 0 // relist
		} else {
			from = next
		}
	}
	return nil
}
