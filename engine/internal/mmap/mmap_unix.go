//go:build unix

package mmap

import (
	"os"
	"syscall"
	"unsafe"
)

// Map maps size bytes of f read-only; the function it returns unmaps.
func Map(f *os.File, size int64) ([]byte, func() error, error) {
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, os.NewSyscallError("mmap", err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}

// Anon returns size bytes of zeroed private memory, on huge pages where
// the platform has them (Linux's transparent huge pages, asked for with
// MADV_HUGEPAGE on a 2 MiB-aligned range): streaming through weights
// there takes fewer TLB misses than through a file mapping's 4 KiB pages.
// The function it returns unmaps.
func Anon(size int) ([]byte, func() error, error) {
	const huge = 2 << 20
	data, err := syscall.Mmap(-1, 0, size+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, os.NewSyscallError("mmap", err)
	}
	off := int(-uintptr(unsafe.Pointer(&data[0])) & (huge - 1))
	adviseHuge(data[off : off+size])
	return data[off : off+size : off+size], func() error { return syscall.Munmap(data) }, nil
}

// Drop tells the kernel that the whole pages within data, a part of a
// read-only file mapping, are not needed: they leave the process's
// resident set (a later read maps them again from the file).
func Drop(data []byte) {
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(data))) &^ (page - 1)
	if hi > lo {
		dontNeed(data[lo-start : hi-start])
	}
}
