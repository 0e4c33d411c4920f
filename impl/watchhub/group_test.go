package watchhub

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The synced group's interval tree finds exactly the ranges that hold a
// key, whatever the sequence of additions and removals: checked against a
// brute-force scan.
func TestRangeTreeMatchesBruteForce(t *testing.T) {
	keys := []string{"", "a", "aa", "ab", "b", "ba", "c", "\xff", "\xff\xff"}
	rapid.Check(t, func(t *rapid.T) {
		var tree rangeTree
		type rng struct {
			start, end string
			inf        bool
		}
		live := map[rng]bool{}
		holds := func(r rng, k string) bool { return r.start <= k && (r.inf || k < r.end) }
		t.Repeat(map[string]func(*rapid.T){
			"add": func(t *rapid.T) {
				r := rng{start: rapid.SampledFrom(keys).Draw(t, "start"), inf: rapid.Bool().Draw(t, "inf")}
				if !r.inf {
					r.end = rapid.SampledFrom(keys).Draw(t, "end")
					if r.end <= r.start {
						t.Skip("empty range")
					}
				}
				tree.get(r.start, r.end, r.inf)
				live[r] = true
			},
			"remove": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("empty")
				}
				var rs []rng
				for r := range live {
					rs = append(rs, r)
				}
				slices.SortFunc(rs, func(a, b rng) int { return cmpRange(a.start, a.end, a.inf, b.start, b.end, b.inf) })
				r := rapid.SampledFrom(rs).Draw(t, "range")
				tree.delete(r.start, r.end, r.inf)
				delete(live, r)
			},
			"": func(t *rapid.T) {
				for _, k := range keys {
					got, want := 0, 0
					tree.stab(k, func(s *watcherSet) { got++ })
					for r := range live {
						if holds(r, k) {
							want++
						}
					}
					if got != want {
						t.Fatalf("key %q is in %d ranges, the tree found %d", k, want, got)
					}
				}
			},
		})
	})
}
