//go:build !race

package e2e

// raceBuild: the tests were built without -race; WSGATE_E2E_RACE=1 still
// builds the gateway processes with it.
const raceBuild = false
