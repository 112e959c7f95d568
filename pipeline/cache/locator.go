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
}

// Size returns the size of the object key.
func (l *Locator) Size(key string) (int64, error) {
	n, _, err := l.Sizes.Get(l.ID+"\x00"+key, func() (int64, error) { return l.Store.Size(key) })
	return n, err
}

// ShardIndex returns the index of shard, read with zarr.ReadShardIndex on
// a miss.
func (l *Locator) ShardIndex(s *zarr.Sharding, shard zarr.Extent) (*zarr.ShardIndex, error) {
	key := fmt.Sprintf("%s\x00%s\x00%d\x00%d", l.ID, shard.Key, shard.Offset, shard.Length)
	idx, hit, err := l.Indexes.Get(key, func() (*zarr.ShardIndex, error) {
		return zarr.ReadShardIndex(l.Store, s, shard)
	})
	if l.IndexLookup != nil {
		l.IndexLookup(hit)
	}
	return idx, err
}
