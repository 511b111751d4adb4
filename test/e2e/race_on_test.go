//go:build race

package e2e

// raceBuild: the tests were built with -race, so the gateway processes
// they start are too.
const raceBuild = true
