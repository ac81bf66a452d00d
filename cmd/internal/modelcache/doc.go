// Package modelcache downloads the llama2.c checkpoints streamgate knows
// into a local cache and finds model files on disk.
//
// Start with Catalog (the known models, their URLs and pinned hashes), then
// Cache.Pull (download with progress, resume and SHA-256 verification) and
// Find (where serve looks for a model's files).
//
// # Where the files come from and how they are checked
//
// The checkpoints are Karpathy's tinyllamas on the Hugging Face Hub
// (https://huggingface.co/karpathy/tinyllamas/resolve/main/...); the Llama-2
// 32k tokenizer.bin that the larger ones share comes from the llama2.c
// repository on GitHub. Every file is checked against a SHA-256 before it
// enters the cache: the one pinned in Catalog where we know it
// (stories260K.bin, tok512.bin, tokenizer.bin), otherwise the one the Hub
// publishes for the file. The Hub stores the checkpoints with Git LFS, and a
// HEAD request on a resolve URL, following redirects on the Hub itself
// (a renamed repository) but not the one to the CDN, answers with
// X-Linked-Etag: the LFS object id, which is the SHA-256 of the
// file's content (X-Linked-Size is its size). Pull reads that header, or
// ETag where X-Linked-Etag is absent, and accepts it only when it is 64
// hex digits: a plain git file's ETag is a git blob id, not a SHA-256, and
// such a file is refused unless its hash is pinned.
//
// # The cache
//
// The cache is one flat directory, by default $XDG_CACHE_HOME/streamgate/
// models, else ~/.cache/streamgate/models. Each file keeps its upstream
// name (so a cache holding stories260K.bin and tok512.bin is also a valid
// --model-dir), beside NAME.sha256 (the verified hash, in sha256sum's
// format) once it is complete. A download in progress is NAME.part; Pull
// resumes it with an HTTP Range request, within one run when the connection
// drops and across runs after an interruption.
package modelcache
