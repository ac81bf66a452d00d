package mmap

import "syscall"

// HugePages reports whether Anon asks for huge pages.
const HugePages = true

func adviseHuge(b []byte) { syscall.Madvise(b, syscall.MADV_HUGEPAGE) }

func dontNeed(b []byte) { syscall.Madvise(b, syscall.MADV_DONTNEED) }
