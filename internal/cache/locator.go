package cache

import (
	"fmt"

	"github.com/damacy-go/damacy/zarr"
)

// Locator is a zarr.Locator for one array that answers from LRUs of
// object sizes and shard indexes. Several arrays may share the LRUs: the
// keys carry the array's ID.
type Locator struct {
	Store   zarr.Store                     // the array's store
	ID      string                         // the array's name in the shared LRUs
	Sizes   *LRU[string, int64]            // object sizes
	Indexes *LRU[string, *zarr.ShardIndex] // shard indexes
	// IndexLookup, when set, is told for each shard index whether it came
	// from the LRU.
	IndexLookup func(hit bool)
	// Versions, when set, holds the version of the object that each size
	// and index in the LRUs was read from, under the same key, for
	// Checked. Give it room for as many entries as Sizes and Indexes
	// together: a version it drops costs a read of the size or index again.
	Versions *LRU[string, Version]
}

// Version tells two states of an object apart: its size and, where the
// store has one, its modification time.
type Version struct {
	Size    int64 // -1: the object is absent
	ModTime int64 // Unix nanoseconds; 0 where the store gives none
}

// Size returns the size of the object key.
func (l *Locator) Size(key string) (int64, error) {
	n, _, err := l.Sizes.Get(l.sizeKey(key), func() (int64, error) { return l.Store.Size(key) })
	return n, err
}

// ShardIndex returns the index of shard, read with zarr.ReadShardIndex on
// a miss.
func (l *Locator) ShardIndex(s *zarr.Sharding, shard zarr.Extent) (*zarr.ShardIndex, error) {
	idx, hit, err := l.Indexes.Get(l.indexKey(shard), func() (*zarr.ShardIndex, error) {
		return zarr.ReadShardIndex(l.Store, s, shard)
	})
	if l.IndexLookup != nil {
		l.IndexLookup(hit)
	}
	return idx, err
}

func (l *Locator) sizeKey(key string) string { return l.ID + "\x00" + key }

func (l *Locator) indexKey(shard zarr.Extent) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%d", l.ID, shard.Key, shard.Offset, shard.Length)
}

// Checked returns a zarr.Locator that plans through l, but first compares
// each object's version now, as version reports it, with the version its
// cached size or index was read from: one read from another version, or
// from an unknown one, is dropped and read again, the new version being
// recorded before the read. So a plan never uses the size or index of an
// object that has since changed, as far as version can tell. l.Versions
// must be set.
func (l *Locator) Checked(version func(key string) Version) zarr.Locator {
	return checkedLocator{l, version}
}

type checkedLocator struct {
	l       *Locator
	version func(key string) Version
}

func (c checkedLocator) Size(key string) (int64, error) {
	refresh(c.l.Versions, c.l.sizeKey(key), c.version(key), c.l.Sizes)
	return c.l.Size(key)
}

func (c checkedLocator) ShardIndex(s *zarr.Sharding, shard zarr.Extent) (*zarr.ShardIndex, error) {
	refresh(c.l.Versions, c.l.indexKey(shard), c.version(shard.Key), c.l.Indexes)
	return c.l.ShardIndex(s, shard)
}

// refresh drops values[k] unless versions[k] is v, and records v.
func refresh[V any](versions *LRU[string, Version], k string, v Version, values *LRU[string, V]) {
	if old, ok := versions.Peek(k); !ok || old != v {
		values.Remove(k)
	}
	versions.Put(k, v) // also marks it as recently used
}
