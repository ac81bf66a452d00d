package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// KeysFile is a Keys kept in one JSON file, for a single replica
// (--keys-file): `streamgate keys` edits the file and a running gateway
// rereads it when it changes, so new and revoked keys take effect at
// once. The file holds hashes, never secrets; it is written whole, by
// rename, with mode 0600.
type KeysFile struct {
	path string

	mu    sync.Mutex
	mem   memKeys
	stamp fileStamp // of the file mem was read from
}

type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

type keysFileBody struct {
	Keys []Key `json:"keys"`
}

// OpenKeysFile returns the keys in path. A missing file is an empty set
// of keys (created on the first CreateKey).
func OpenKeysFile(path string) (*KeysFile, error) {
	f := &KeysFile{path: path}
	f.mem.init()
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// reload rereads the file if it changed since it was read. f.mu is held
// or f is not shared yet.
func (f *KeysFile) reload() error {
	st, err := os.Stat(f.path)
	var stamp fileStamp
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("keys file: %w", err)
	default:
		stamp = fileStamp{mod: st.ModTime(), size: st.Size(), ok: true}
	}
	if stamp == f.stamp {
		return nil
	}
	var body keysFileBody
	if stamp.ok {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return fmt.Errorf("keys file: %w", err)
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return fmt.Errorf("keys file %s: %w", f.path, err)
		}
	}
	f.mem.init()
	for _, k := range body.Keys {
		f.mem.byHash[k.Hash] = k
	}
	f.stamp = stamp
	return nil
}

func (f *KeysFile) save() error {
	keys, _ := f.mem.ListKeys(context.Background())
	b, err := json.MarshalIndent(keysFileBody{Keys: keys}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".keys-*")
	if err != nil {
		return fmt.Errorf("keys file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("keys file: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("keys file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keys file: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("keys file: %w", err)
	}
	f.stamp = fileStamp{} // reread on next use
	return nil
}

// CreateKey implements Keys.
func (f *KeysFile) CreateKey(ctx context.Context, k Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reload(); err != nil {
		return err
	}
	if err := f.mem.CreateKey(ctx, k); err != nil {
		return err
	}
	return f.save()
}

// LookupKey implements Keys.
func (f *KeysFile) LookupKey(ctx context.Context, hash string) (Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reload(); err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return f.mem.LookupKey(ctx, hash)
}

// ListKeys implements Keys.
func (f *KeysFile) ListKeys(ctx context.Context) ([]Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f.mem.ListKeys(ctx)
}

// RevokeKey implements Keys.
func (f *KeysFile) RevokeKey(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reload(); err != nil {
		return err
	}
	if err := f.mem.RevokeKey(ctx, name); err != nil {
		return err
	}
	return f.save()
}

var _ Keys = (*KeysFile)(nil)
