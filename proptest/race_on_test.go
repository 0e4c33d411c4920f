//go:build race

package proptest

// raceEnabled is true when the race detector is on: the slow-consumer test
// then runs scaled down.
const raceEnabled = true
