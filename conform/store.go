package conform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactionInForce returns the compaction revision of the store behind cli
// (0: never compacted), which a run must record: a read below it fails with
// ErrCompacted and a watch from below it is cancelled with it, whoever
// compacted. head is the store's revision, key a key of the run (absent).
//
// etcd does not report its compaction revision (Maintenance.Status has no
// such field), so it is learnt as a client sees it: a read at revision 1
// succeeds on a store never compacted above 1; otherwise a watch from
// revision 1 is cancelled with CompactRevision set to the compaction in
// force (etcd's syncWatchers, server/storage/mvcc/watchable_store.go; the
// reference server does the same). The answer is then confirmed by reads at
// that revision (which must succeed) and the one below (which must fail).
// A store whose watch says nothing, or contradicts its reads, is searched
// by reads alone (a binary search between 1 and head).
func compactionInForce(ctx context.Context, cli *clientv3.Client, key string, head int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	readable := func(rev int64) (bool, error) {
		_, err := cli.Get(ctx, key, clientv3.WithRev(rev))
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, rpctypes.ErrCompacted):
			return false, nil
		default:
			return false, fmt.Errorf("reading %q at revision %d to learn the compaction in force: %v", key, rev, err)
		}
	}
	if ok, err := readable(1); err != nil || ok {
		return 0, err
	}
	if rev := watchCompaction(ctx, cli, key); rev > 1 && rev <= head {
		above, err := readable(rev)
		if err != nil {
			return 0, err
		}
		below, err := readable(rev - 1)
		if err != nil {
			return 0, err
		}
		if above && !below {
			return rev, nil
		}
	}
	// Reads alone: the lowest readable revision in (1, head].
	lo, hi := int64(1), head // lo is not readable, hi is
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := readable(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// watchCompaction watches key from revision 1 and returns the
// CompactRevision of the cancel that follows, or 0 when none comes within
// 5 s.
func watchCompaction(ctx context.Context, cli *clientv3.Client, key string) int64 {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for resp := range cli.Watch(wctx, key, clientv3.WithRev(1)) {
		if resp.CompactRevision != 0 {
			return resp.CompactRevision
		}
		if resp.Canceled {
			return 0
		}
	}
	return 0
}
