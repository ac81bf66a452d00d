//go:build unix && !linux

package mmap

// HugePages reports whether Anon asks for huge pages.
const HugePages = false

func adviseHuge(b []byte) {}

func dontNeed(b []byte) {}
