package conform

import (
	"strings"
	"testing"
	"time"

	"github.com/watchspec/watchspec/model/spec"
)

// The Kubernetes-shaped workload against real etcd passes every property:
// the workload itself raises no false alarm, and it exercises what the
// apiserver relies on — optimistic writes, paged lists at a revision,
// watches from a list's revision with prevKV, progress, compaction through
// compact_rev_key. SPEC §2–§3.
func TestEtcdKubernetesWorkload(t *testing.T) {
	tr, raw, stats := recordEtcd(t, 1, -1, Config{Duration: 2 * time.Second, Seed: 4, Clients: 3, Watchers: 3, Workload: WorkloadKubernetes})
	t.Logf("stats %+v", stats)
	res := checkPasses(t, tr, raw, true)
	for _, p := range []spec.Property{spec.Linearizable, spec.WriteRevision, spec.Reliable, spec.Bookmarkable, spec.PrevKV, spec.Resumable} {
		if res.Checks[p] == 0 {
			t.Errorf("the kubernetes workload never exercised %s", p)
		}
	}
	var txns, pages, compactTxns, compactions int
	for _, o := range tr.Ops {
		switch r := o.Request; {
		case r.Txn != nil && len(r.Txn.Compare) == 1 && r.Txn.Compare[0].Key == CompactRevKey:
			compactTxns++
		case r.Txn != nil:
			txns++
		case r.Range != nil && r.Range.Limit > 0 && r.Range.Revision > 0 && strings.HasSuffix(r.Range.Key, "\x00"):
			pages++ // a continuation
		case r.Compact != nil:
			compactions++
		case r.Put != nil || r.Delete != nil:
			t.Errorf("the kubernetes workload sent a plain put or delete: %+v", r)
		}
	}
	if txns == 0 || pages == 0 || compactTxns == 0 || compactions == 0 {
		t.Errorf("%d optimistic transactions, %d later pages of lists, %d compaction transactions, %d compactions", txns, pages, compactTxns, compactions)
	}
}
