//go:build race

package apiservertest

// raceBuild: the tests run with -race, and so is the command they build
// (which then shares the build cache with them).
const raceBuild = true
