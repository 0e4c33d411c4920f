package watch

import (
	"fmt"
	"strconv"

	"github.com/watchspec/watchspec/model/kv"
)

func describeRange(r Request) string {
	switch r.RangeEnd {
	case "":
		return strconv.Quote(r.Key)
	case "\x00":
		return fmt.Sprintf("[%q, ∞)", r.Key)
	}
	return fmt.Sprintf("[%q, %q)", r.Key, r.RangeEnd)
}

// describeEvent renders an event for a message: PUT "a"=“v”@7 (create 5, version 3).
func describeEvent(e kv.Event) string {
	if e.Type == kv.Delete {
		if e.KV.Value != "" || e.KV.CreateRevision != 0 || e.KV.Version != 0 {
			// A tombstone holds the key and the delete's revision only;
			// show what else this one carries.
			return fmt.Sprintf("DELETE %s", describeKV(e.KV))
		}
		return fmt.Sprintf("DELETE %q@%d", e.KV.Key, e.KV.ModRevision)
	}
	return fmt.Sprintf("PUT %s", describeKV(e.KV))
}

func describeKV(kv kv.KeyValue) string {
	return fmt.Sprintf("%q=%q@%d (create %d, version %d)", kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version)
}

func keysOf(evs []kv.Event) []string {
	var keys []string
	seen := make(map[string]bool)
	for _, e := range evs {
		if !seen[e.KV.Key] {
			seen[e.KV.Key] = true
			keys = append(keys, e.KV.Key)
		}
	}
	return keys
}

func revisionsOf(evs []kv.Event) []int64 {
	var out []int64
	for _, e := range evs {
		if len(out) == 0 || out[len(out)-1] != e.KV.ModRevision {
			out = append(out, e.KV.ModRevision)
		}
	}
	return out
}
