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
