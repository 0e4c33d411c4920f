package main

import (
	"errors"
	"time"

	"github.com/watchspec/watchspec/conform"
)

// startEmbedded starts the reference server for a conformance run.
// TEMPORARY: replaced when impl/server lands (issue 5).
func startEmbedded(cfg *conform.Config, restartEvery time.Duration, progress func(string, ...any)) (string, func(), error) {
	return "", nil, errors.New("the embedded reference server is not available yet: give --endpoints")
}
