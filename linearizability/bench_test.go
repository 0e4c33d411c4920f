package linearizability

import (
	"github.com/watchspec/watchspec/internal/histsim"
	"testing"

	"github.com/watchspec/watchspec/model/watch"
)

// BenchmarkCheck100k: a 100,000-operation history from 8 clients with
// compaction, a collector watch on every key, checked end to end
// (linearization, then watch validation). Target: under 10 s per op.
func BenchmarkCheck100k(b *testing.B) {
	tr := simulate(simConfig{ops: 100_000, clients: 8, compactEvery: 200, unknown: 0.001, watch: true, seed: 1})
	b.ResetTimer()
	for range b.N {
		res, err := Check(tr, Options{})
		if err != nil || res.Verdict != Linearizable || len(res.Violations) > 0 {
			b.Fatalf("%v %v %v", err, res.Verdict, res.Violations)
		}
		b.ReportMetric(float64(len(tr.Ops)), "ops")
	}
}

// BenchmarkValidateWatchEvents: the watch validator over one stream of
// 1,000,000 events (a key range with three keys per revision). Target: under
// 5 s per op.
func BenchmarkValidateWatchEvents(b *testing.B) {
	const revisions = 1_000_000 / 3
	h, req, stream := histsim.ThreeKeyTxns(revisions)
	b.ResetTimer()
	for range b.N {
		v := watch.NewValidator(h, req)
		for _, r := range stream {
			if vs := v.Observe(r); len(vs) > 0 {
				b.Fatal(vs)
			}
		}
	}
	b.ReportMetric(float64(revisions*3)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
