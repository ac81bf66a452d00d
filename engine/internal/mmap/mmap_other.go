//go:build !unix

package mmap

import (
	"io"
	"os"
)

// Map reads the file: this platform has no syscall.Mmap.
func Map(f *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && err != io.EOF {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}

// Anon returns size bytes of zeroed memory (no huge pages here).
func Anon(size int) ([]byte, func() error, error) {
	return make([]byte, size), func() error { return nil }, nil
}

// Drop does nothing: this platform's Map is a plain read.
func Drop(data []byte) {}

// HugePages reports whether Anon asks for huge pages.
const HugePages = false
