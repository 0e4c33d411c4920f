//go:build !race

package apiservertest

const raceBuild = false
