package apiservertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Compactor compacts the apiserver's etcd as the apiserver's own compactor
// does (k8s.io/apiserver pkg/storage/etcd3/compact.go, etcd3.Compact):
// record the revision in compact_rev_key if its version is the one last
// seen, then compact. The apiserver's storage and its watch cache learn of
// the compaction by watching that key. (The test server runs with
// compaction off, --etcd-compaction-interval=0, so that the run knows
// every compaction: conform/kube's Config.Compact.)
type Compactor struct {
	cli     *clientv3.Client
	mu      sync.Mutex
	version int64
}

// NewCompactor connects to the etcd at endpoints.
func NewCompactor(endpoints []string) (*Compactor, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &Compactor{cli: cli}, nil
}

// Compact compacts at rev; it returns the revision of the compact_rev_key
// write and the revision the store was at when the compaction took effect
// (the Compact response's header).
func (c *Compactor) Compact(ctx context.Context, rev int64) (keyRev, at int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	const key = "compact_rev_key"
	txn, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", c.version)).
		Then(clientv3.OpPut(key, strconv.FormatInt(rev, 10))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, 0, err
	}
	if !txn.Succeeded {
		return 0, 0, fmt.Errorf("%s was written by someone else (its version is not %d)", key, c.version)
	}
	c.version++
	resp, err := c.cli.Compact(ctx, rev)
	if err != nil {
		return 0, 0, err
	}
	return txn.Header.Revision, resp.Header.Revision, nil
}

// Close closes the connection.
func (c *Compactor) Close() { c.cli.Close() }
