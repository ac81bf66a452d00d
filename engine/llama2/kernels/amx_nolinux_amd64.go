//go:build !linux && !purego

package kernels

// requestAMX reports false: only Linux is asked for the AMX tile state.
func requestAMX() bool { return false }
