package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/impl/server"
)

// startEmbedded starts watchspec's reference server in-process on a loopback
// port with a temporary data directory, points cfg at it, and — with
// restartEvery > 0 — lets the run restart it on the same data directory and
// address. It returns the endpoint and a cleanup that stops the server and
// removes the data.
func startEmbedded(cfg *conform.Config, restartEvery time.Duration, progress func(string, ...any)) (string, func(), error) {
	dir, err := os.MkdirTemp("", "watchspec-reference-")
	if err != nil {
		return "", nil, err
	}
	opts := server.Options{Name: "watchspec-reference"}
	r, err := server.Start(dir, "127.0.0.1:0", opts)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	var mu sync.Mutex
	addr := r.Addr()
	cfg.Endpoints = []string{r.Endpoint()}
	cfg.System, cfg.SystemVersion = "watchspec-reference", "dev"
	if restartEvery > 0 {
		cfg.RestartEvery = restartEvery
		cfg.Restart = func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if err := r.Close(); err != nil {
				return fmt.Errorf("stopping: %v", err)
			}
			next, err := server.Start(dir, addr, opts)
			if err != nil {
				return fmt.Errorf("starting again on %s: %v", addr, err)
			}
			r = next
			progress("restarted the reference server on %s", addr)
			return nil
		}
	}
	cleanup := func() {
		mu.Lock()
		defer mu.Unlock()
		r.Close()
		os.RemoveAll(dir)
	}
	return r.Endpoint(), cleanup, nil
}
