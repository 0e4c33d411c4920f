//go:build race

package main

// raceEnabled is true when the race detector is on: the end-to-end bench
// test is skipped then.
const raceEnabled = true
