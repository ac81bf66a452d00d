//go:build !purego

package kernels

import "syscall"

// requestAMX asks Linux for the AMX tile data state for this process
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), which a thread
// needs before its first tile instruction; it reports whether it was
// granted.
func requestAMX() bool {
	const reqXCompPerm, xTileData = 0x1023, 18
	_, _, err := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, reqXCompPerm, xTileData, 0)
	return err == 0
}
