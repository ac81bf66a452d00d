// Package mmap maps model files read-only (syscall.Mmap on Unix; a plain
// read elsewhere), for the llama2.c and GGUF loaders.
package mmap
