// Package mmap maps model files read-only (syscall.Mmap on Unix; a plain
// read elsewhere), for the llama2.c and GGUF loaders, and gives anonymous
// memory on huge pages (Linux) for weights copied out of a mapping.
package mmap
