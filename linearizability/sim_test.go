package linearizability

import (
	"github.com/watchspec/watchspec/internal/histsim"
	"github.com/watchspec/watchspec/traces"
)

// simConfig shapes a simulated run (internal/histsim.Config).
type simConfig struct {
	ops, clients int
	compactEvery int     // every n-th operation compacts (0: never)
	unknown      float64 // share of writes whose client never learns the outcome
	watch        bool    // record a collector watch over every key
	seed         uint64
}

// simulate produces a linearizable trace (internal/histsim.Simulate).
func simulate(cfg simConfig) *traces.Trace {
	return histsim.Simulate(histsim.Config{Ops: cfg.ops, Clients: cfg.clients, CompactEvery: cfg.compactEvery,
		Unknown: cfg.unknown, Watch: cfg.watch, Seed: cfg.seed})
}
