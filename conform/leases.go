package conform

// The lease side of the full workload (Config.Leases; docs/SPEC.md §2.9–
// §2.11, §3.14, §3.15): clients that grant leases, put keys with them,
// keep some alive, revoke some and let others expire, so that the server
// deletes keys on its own and every watch over them sees it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/model/kv"
)

// leaseFate is what a lease client means to do with a lease it granted.
type leaseFate int

const (
	// fateExpire: a short TTL, never kept alive: the server expires it.
	fateExpire leaseFate = iota
	// fateKeepOnce: a short TTL kept alive with KeepAliveOnce (the tight
	// bound of §2.11) until keepUntil, then left to expire.
	fateKeepOnce
	// fateKeepStream: as fateKeepOnce, with a clientv3 KeepAlive stream.
	fateKeepStream
	// fateRevoke: a long TTL, revoked by the client.
	fateRevoke
)

// heldLease is a lease a lease client granted and has not seen end.
type heldLease struct {
	id        clientv3.LeaseID
	fate      leaseFate
	keys      int                // keys put with it
	keepUntil time.Time          // keep alive until (fateRevoke: revoke after)
	expiresBy time.Time          // when to ask whether it has expired
	stopKeep  context.CancelFunc // of a KeepAlive stream
}

// leaseKeys are the keys lease client i puts with leases, under the run's
// prefix "l/" (which the KV clients only read).
func (r *run) leaseKeys(i int) []string {
	var ks []string
	for j := range 5 {
		ks = append(ks, fmt.Sprintf("%sl/%d/%d", r.prefix, i, j))
	}
	return ks
}

// leaseClient grants leases and uses them until ctx ends, then revokes the
// leases it still holds, so that no expiry of this run's leases deletes
// anything after it (revisions are store-wide).
//
// Each step draws from the seeded rng: grant a lease (a long one when the
// client holds none; TTL 1 or 2 s — a
// server may raise 1 to its minimum, 2 s with etcd's default flags — to be
// kept alive for a while or left to expire, or 10–30 s to be revoked after
// 0.5–2.5 s), put a leased key (alone, or two
// or three in one transaction), keep a lease alive once, ask a lease's time to
// live with its keys, list the leases, revoke a lease, overwrite a leased
// key without a lease (which detaches it), or put with a lease that is gone
// (refused: "requested lease not found").
func (r *run) leaseClient(ctx context.Context, i int) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(5000+i)))
	c := r.rec.Client(cli)
	ls := r.rec.NewLease(cli.Lease)
	keys := r.leaseKeys(i)
	var held []*heldLease
	var gone []clientv3.LeaseID // revoked or seen expired
	rctx := func(parent context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(parent, r.cfg.RequestTimeout)
	}
	drop := func(j int) {
		if h := held[j]; h.stopKeep != nil {
			h.stopKeep()
		}
		gone = append(gone, held[j].id)
		held = append(held[:j], held[j+1:]...)
	}
	for ctx.Err() == nil {
		time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
		now := time.Now()
		// Keep alive the leases whose time has not come (one step each).
		for _, h := range held {
			if h.fate == fateKeepOnce && now.Before(h.keepUntil) && rng.IntN(4) == 0 {
				kctx, cancel := rctx(ctx)
				if _, err := ls.KeepAliveOnce(kctx, h.id); err == nil {
					r.stats.keepAlives.Add(1)
				}
				cancel()
			}
			if h.stopKeep != nil && now.After(h.keepUntil) {
				h.stopKeep()
				h.stopKeep = nil
			}
		}
		// Ask after a lease that should have expired by now whether it has.
		for j, h := range held {
			if h.fate != fateRevoke && now.After(h.expiresBy) {
				tctx, cancel := rctx(ctx)
				t, err := ls.TimeToLive(tctx, h.id)
				cancel()
				if err == nil && t.TTL == -1 {
					r.stats.leaseExpiries.Add(1)
					drop(j)
				} else {
					h.expiresBy = time.Now().Add(300 * time.Millisecond)
				}
				break
			}
		}
		p := rng.IntN(100)
		var h *heldLease
		j := -1
		if len(held) > 0 {
			j = rng.IntN(len(held))
			h = held[j]
		}
		switch {
		case p < 20 && len(held) < 4 || h == nil:
			fate := leaseFate(rng.IntN(4))
			if !slices.ContainsFunc(held, func(h *heldLease) bool { return h.fate == fateRevoke }) {
				fate = fateRevoke // always one long lease, with keys, live
			}
			ttl := int64(1 + rng.IntN(2))
			if fate == fateRevoke {
				ttl = int64(10 + rng.IntN(21))
			}
			gctx, cancel := rctx(ctx)
			g, err := ls.Grant(gctx, ttl)
			cancel()
			if err != nil {
				continue
			}
			r.stats.leaseGrants.Add(1)
			h = &heldLease{id: g.ID, fate: fate, keepUntil: time.Now().Add(time.Duration(300+rng.IntN(900)) * time.Millisecond)}
			if fate == fateRevoke {
				h.keepUntil = time.Now().Add(time.Duration(500+rng.IntN(2000)) * time.Millisecond)
			}
			// etcd looks for expired leases every 500 ms.
			h.expiresBy = time.Now().Add(time.Duration(g.TTL)*time.Second + 600*time.Millisecond)
			if fate != fateExpire {
				h.expiresBy = h.expiresBy.Add(time.Until(h.keepUntil))
			}
			if fate == fateKeepStream {
				kctx, stop := context.WithCancel(ctx)
				if ch, err := ls.KeepAlive(kctx, g.ID); err == nil {
					h.stopKeep = stop
					go func() {
						for range ch {
							r.stats.keepAlives.Add(1)
						}
					}()
				} else {
					stop()
				}
			}
			held = append(held, h)
		case p < 55:
			// Put one leased key, or two or three in one transaction; half
			// of the time with the long lease, two or three keys at once,
			// so that its revoke deletes several keys.
			long := false
			if rng.IntN(2) == 0 {
				if j := slices.IndexFunc(held, func(h *heldLease) bool { return h.fate == fateRevoke }); j >= 0 {
					h, long = held[j], true
				}
			}
			k := keys[rng.IntN(len(keys))]
			req := kv.Request{Put: &kv.PutRequest{Key: k, Value: r.value(5000 + i), Lease: int64(h.id), PrevKV: rng.IntN(2) == 0}}
			n := 1
			if long || rng.IntN(3) == 0 {
				txn := &kv.TxnRequest{}
				for _, j := range rng.Perm(len(keys))[:2+rng.IntN(2)] {
					txn.Success = append(txn.Success, kv.Op{Put: &kv.PutRequest{Key: keys[j], Value: r.value(5000 + i), Lease: int64(h.id)}})
				}
				req, n = kv.Request{Txn: txn}, len(txn.Success)
			}
			resp, err := r.do(ctx, c, req)
			if err == nil && resp.Err == nil {
				h.keys += n
				r.stats.leasedPuts.Add(int64(n))
			}
		case p < 65:
			tctx, cancel := rctx(ctx)
			t, err := ls.TimeToLive(tctx, h.id, clientv3.WithAttachedKeys())
			cancel()
			if err == nil && t.TTL == -1 {
				if h.fate != fateRevoke {
					r.stats.leaseExpiries.Add(1)
				}
				drop(j)
			}
		case p < 70:
			lctx, cancel := rctx(ctx)
			ls.Leases(lctx)
			cancel()
		case p < 78 && h.fate == fateRevoke && now.After(h.keepUntil) && (h.keys >= 2 || now.After(h.keepUntil.Add(time.Second))):
			// Revoke a long lease once it has had keys (or waited a
			// second more).
			vctx, cancel := rctx(ctx)
			_, err := ls.Revoke(vctx, h.id)
			cancel()
			if err == nil {
				r.stats.leaseRevokes.Add(1)
			}
			if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
				drop(j)
			}
		case p < 85:
			// Overwrite a leased key without a lease: it leaves its lease.
			r.do(ctx, c, kv.Request{Put: &kv.PutRequest{Key: keys[rng.IntN(len(keys))], Value: r.value(5000 + i)}})
		case p < 90 && len(gone) > 0:
			// A put with a lease that is gone: refused.
			id := gone[rng.IntN(len(gone))]
			r.do(ctx, c, kv.Request{Put: &kv.PutRequest{Key: keys[rng.IntN(len(keys))], Value: r.value(5000 + i), Lease: int64(id)}})
		}
	}
	// Unless a lease of the run was seen to expire, wait (up to 5 s) for
	// one, granting one if need be: a restart counts a lease's TTL again,
	// so restarts every second keep 2 s leases from ever expiring while
	// the workload runs.
	octx := context.WithoutCancel(ctx)
	if r.stats.leaseExpiries.Load() == 0 && !slices.ContainsFunc(held, func(h *heldLease) bool { return h.fate != fateRevoke }) {
		// None left to expire: grant one, with a key.
		gctx, cancel := rctx(octx)
		if g, err := ls.Grant(gctx, 1); err == nil {
			r.stats.leaseGrants.Add(1)
			held = append(held, &heldLease{id: g.ID, fate: fateExpire})
			if resp, err := r.do(octx, c, kv.Request{Put: &kv.PutRequest{Key: keys[0], Value: r.value(5000 + i), Lease: int64(g.ID)}}); err == nil && resp.Err == nil {
				r.stats.leasedPuts.Add(1)
			}
		}
		cancel()
	}
	for deadline := time.Now().Add(5 * time.Second); r.stats.leaseExpiries.Load() == 0 && time.Now().Before(deadline); {
		expiring := false
		for j, h := range held {
			if h.fate == fateRevoke {
				continue
			}
			expiring = true
			if h.stopKeep != nil {
				h.stopKeep()
				h.stopKeep = nil
			}
			tctx, cancel := rctx(octx)
			t, err := ls.TimeToLive(tctx, h.id)
			cancel()
			if err == nil && t.TTL == -1 {
				r.stats.leaseExpiries.Add(1)
				drop(j)
				break
			}
		}
		if !expiring {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Revoke what is left, so that nothing of this run expires after it,
	// after asking each its time to live.
	for _, h := range held {
		if h.stopKeep != nil {
			h.stopKeep()
		}
		tctx, cancel := rctx(octx)
		ls.TimeToLive(tctx, h.id, clientv3.WithAttachedKeys())
		cancel()
		vctx, cancel := rctx(octx)
		if _, err := ls.Revoke(vctx, h.id); err == nil {
			r.stats.leaseRevokes.Add(1)
		}
		cancel()
	}
	return nil
}
