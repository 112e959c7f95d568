package pipeline

import (
	"cmp"
	"container/list"
	"os"
	"slices"
	"sync"

	"github.com/damacy-go/damacy/internal/cache"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// The chunk cache (Config.ChunkCacheBytes) keeps decoded chunks across
// batches in a region reserved at New: device memory after the wave
// buffers on the CUDA engine, host memory after the arena on the host
// engine. Either way the assemble step reads a cached chunk as it reads a
// chunk of the wave, at an offset from the same base, so the kernel needs
// no change.
//
// Planning looks every chunk up: a hit is pinned until its wave has been
// assembled and costs the wave no read, staging, copy or decode; a miss
// is decoded as usual and afterwards copied into the cache where room can
// be made. Entries are variable-sized (each chunk's decoded bytes, 256-
// aligned) and placed first-fit in a list of free extents; room is made
// by evicting the least recently used entries that no wave in flight
// reads. All chunks of a zarr array decode to the same size, so with one
// or a few arrays an eviction frees a hole of the right size; when sizes
// are mixed, eviction stops after evictLimit times the size asked for,
// and that chunk is not cached, rather than flushing the cache for it.
//
// The default cache (Config.ChunkCacheBytes 0, host engine) takes only
// local chunks that must be decoded, and only at their second miss: a miss is
// remembered (its key, in a queue of misses bounded by the cache's size in
// their decoded bytes) and cached when it misses again while remembered.
// So a chunk read once, by a scan or at random from a dataset many times
// the cache's size, costs no copy and evicts nothing, and the chunks a
// training loop reads again within the cache's reach are kept.
//
// A chunk is keyed by its object (file path, or URI and key), the
// object's version and its byte range: a file rewritten since (another
// size or modification time) gives other keys, so its old entries are
// never found again and age out.

// evictLimit bounds the bytes one insertion may evict, in multiples of
// its own size.
const evictLimit = 4

// maxMisses bounds the misses the default cache remembers, whatever
// their bytes.
const maxMisses = 1 << 18

// chunkKey names a decoded chunk across batches.
type chunkKey struct {
	object         string        // local path, or the array's URI and the object's key
	version        cache.Version // of the object when the batch was planned
	offset, length int64         // the chunk's stored bytes in the object
}

// cacheEntry is one decoded chunk in the cache region.
type cacheEntry struct {
	key       chunkKey
	off       int64         // where it lies in the region
	size      int64         // bytes of the region it holds (256-aligned)
	src       ptx.Source    // the decoded chunk as the gather reads it, Offset aside
	pins      int           // waves in flight that read it
	elem      *list.Element // its place in the LRU, while published and not pinned
	published bool          // found by lookups (else reserved by a wave, being filled)
}

// extent is a free stretch of the region.
type extent struct{ off, n int64 }

// chunkCache is the bookkeeping of the cache region: entries, free
// extents, pins and recency. The engines own the memory and the copies.
// Its methods are safe for concurrent use.
type chunkCache struct {
	stats *statsSink

	mu      sync.Mutex
	size    int64
	free    []extent  // by offset, neighbours merged
	lru     list.List // published entries no wave pins; front: most recently used
	entries map[chunkKey]*cacheEntry
	held    int64 // bytes of the region in entries, published or not

	secondMiss bool // takes a chunk only at its second miss (the default cache)
	misses     missQueue
}

// missQueue remembers recent misses: their keys, oldest first, with the
// decoded bytes of those remembered bounded by the cache's size.
type missQueue struct {
	seq   map[chunkKey]uint64 // a remembered key: the sequence number of its miss
	queue []missed            // every miss noted, oldest first from head
	head  int
	next  uint64 // the sequence number of the next miss
	bytes int64  // decoded bytes of queue[head:]
}

type missed struct {
	key chunkKey
	seq uint64
	n   int64
}

func newChunkCache(size int64, secondMiss bool, stats *statsSink) *chunkCache {
	size &^= 255
	c := &chunkCache{stats: stats, size: size, free: []extent{{0, size}}, entries: map[chunkKey]*cacheEntry{}, secondMiss: secondMiss}
	if secondMiss {
		c.misses.seq = map[chunkKey]uint64{}
	}
	return c
}

// wants reports whether the cache looks up and keeps job j's chunk. The
// default cache takes only local files' chunks that must be decoded: a
// chunk stored as it is used (its own codec, a shard's inner one for a
// sharded array, has no compression and nothing but bytes) costs no
// decode, being read in place, and the key of an object of another store
// would cost a request for its size where it is not cached.
func (c *chunkCache) wants(j *job) bool {
	if !c.secondMiss {
		return true
	}
	return j.src.dir != nil && !rawCodec(j.chunk.Codec)
}

// admit reports whether a miss of chunk k, n bytes decoded, is to be
// cached: always, except by the default cache, which takes it only when
// it missed before and is still remembered, and otherwise remembers it.
func (c *chunkCache) admit(k chunkKey, n int64) bool {
	if !c.secondMiss {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := &c.misses
	if _, ok := q.seq[k]; ok {
		delete(q.seq, k)
		return true
	}
	q.seq[k] = q.next
	q.queue = append(q.queue, missed{k, q.next, n})
	q.next++
	q.bytes += n
	for q.bytes > c.size || len(q.queue)-q.head > maxMisses {
		old := q.queue[q.head]
		q.queue[q.head] = missed{}
		q.head++
		q.bytes -= old.n
		if s, ok := q.seq[old.key]; ok && s == old.seq {
			delete(q.seq, old.key)
		}
	}
	if q.head > len(q.queue)/2 && q.head > 1024 {
		q.queue = append(q.queue[:0], q.queue[q.head:]...)
		q.head = 0
	}
	return false
}

// lookup returns k's entry, pinned, when the cache holds it decoded from
// a chunk laid out as want (data type, byte order, shape, strides); else
// nil. It counts a hit or a miss.
func (c *chunkCache) lookup(k chunkKey, want *ptx.Source) *cacheEntry {
	c.mu.Lock()
	e := c.entries[k]
	if e != nil && !sameLayout(&e.src, want) {
		e = nil
	}
	if e != nil {
		e.pins++
		if e.elem != nil {
			c.lru.Remove(e.elem)
			e.elem = nil
		}
	}
	c.mu.Unlock()
	c.stats.update(func(s *Stats) {
		if e != nil {
			s.ChunkCacheHits++
		} else {
			s.ChunkCacheMisses++
		}
	})
	return e
}

func sameLayout(a, b *ptx.Source) bool {
	return a.Dtype == b.Dtype && a.BigEndian == b.BigEndian && slices.Equal(a.Shape, b.Shape) && slices.Equal(a.Strides, b.Strides)
}

// release unpins an entry lookup returned, once its wave has been
// assembled: unpinned, it is the most recently used.
func (c *chunkCache) release(e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.pins--
	switch {
	case e.pins < 0:
		panic("pipeline: chunk cache entry released twice")
	case e.pins == 0 && e.published:
		e.elem = c.lru.PushFront(e)
	}
}

// reserve makes room for the n decoded bytes of chunk k, laid out as src,
// and returns its entry, unpublished: lookups miss it until publish. It
// returns nil when k is cached already or no room can be made (every
// entry in the way is pinned, or making room would evict more than
// evictLimit times n).
func (c *chunkCache) reserve(k chunkKey, src ptx.Source, n int64) *cacheEntry {
	size := align(n)
	if size > c.size {
		return nil
	}
	c.mu.Lock()
	if c.entries[k] != nil {
		c.mu.Unlock()
		return nil
	}
	off, ok := c.alloc(size)
	var evicted, evictedBytes int64
	for !ok && evictedBytes < evictLimit*size {
		back := c.lru.Back()
		if back == nil {
			break
		}
		victim := back.Value.(*cacheEntry)
		c.lru.Remove(back)
		victim.elem = nil
		delete(c.entries, victim.key)
		c.freeEntry(victim)
		evicted++
		evictedBytes += victim.size
		off, ok = c.alloc(size)
	}
	var e *cacheEntry
	if ok {
		e = &cacheEntry{key: k, off: off, size: size, src: src}
		e.src.Offset = 0
		c.held += size
	}
	held := c.held
	c.mu.Unlock()
	c.stats.update(func(s *Stats) {
		s.ChunkCacheEvictions += evicted
		s.ChunkCacheBytes = held
	})
	return e
}

// publish makes a reserved entry, now filled, found by lookups. When
// another entry of its key was published first (two batches in flight
// decoded the same chunk), it is dropped instead.
func (c *chunkCache) publish(e *cacheEntry) {
	c.mu.Lock()
	if c.entries[e.key] != nil {
		c.freeEntry(e)
	} else {
		c.entries[e.key] = e
		e.published = true
		e.elem = c.lru.PushFront(e)
	}
	held := c.held
	c.mu.Unlock()
	c.stats.update(func(s *Stats) { s.ChunkCacheBytes = held })
}

// drop frees a reserved entry that will not be filled (its wave failed).
func (c *chunkCache) drop(e *cacheEntry) {
	c.mu.Lock()
	c.freeEntry(e)
	held := c.held
	c.mu.Unlock()
	c.stats.update(func(s *Stats) { s.ChunkCacheBytes = held })
}

// freeEntry returns an entry's bytes to the free extents.
func (c *chunkCache) freeEntry(e *cacheEntry) {
	c.held -= e.size
	c.freeRange(e.off, e.size)
}

// alloc takes n bytes from the first free extent that has them.
func (c *chunkCache) alloc(n int64) (int64, bool) {
	for i, x := range c.free {
		if x.n < n {
			continue
		}
		if x.n == n {
			c.free = slices.Delete(c.free, i, i+1)
		} else {
			c.free[i] = extent{x.off + n, x.n - n}
		}
		return x.off, true
	}
	return 0, false
}

// freeRange returns [off, off+n) to the free extents, merging it with its
// neighbours.
func (c *chunkCache) freeRange(off, n int64) {
	i, _ := slices.BinarySearchFunc(c.free, off, func(x extent, off int64) int { return cmp.Compare(x.off, off) })
	prev := i > 0 && c.free[i-1].off+c.free[i-1].n == off
	next := i < len(c.free) && off+n == c.free[i].off
	switch {
	case prev && next:
		c.free[i-1].n += n + c.free[i].n
		c.free = slices.Delete(c.free, i, i+1)
	case prev:
		c.free[i-1].n += n
	case next:
		c.free[i] = extent{off, n + c.free[i].n}
	default:
		c.free = slices.Insert(c.free, i, extent{off, n})
	}
}

// batchVersions gives the versions of the objects one batch reads, for
// the chunk cache's keys and for planning through cache.Locator.Checked:
// a local file is statted once per batch (and the open-file cache and the
// file mappings told, so that a file replaced or rewritten since is opened
// or mapped again); an object of another
// store is taken at its cached size.
type batchVersions struct {
	files *cache.Files
	maps  *fileMaps // nil: none
	seen  map[versionRef]cache.Version
}

type versionRef struct {
	src *source
	key string
}

func newBatchVersions(files *cache.Files, maps *fileMaps) *batchVersions {
	return &batchVersions{files: files, maps: maps, seen: map[versionRef]cache.Version{}}
}

// of returns the version of src's object key.
func (b *batchVersions) of(src *source, key string) cache.Version {
	ref := versionRef{src, key}
	if v, ok := b.seen[ref]; ok {
		return v
	}
	v := cache.Version{Size: -1}
	if src.dir != nil {
		if path, err := src.dir.Path(key); err == nil {
			if fi, err := os.Stat(path); err == nil {
				b.files.Refresh(path, fi)
				if b.maps != nil {
					b.maps.refresh(path, fi)
				}
				v = cache.Version{Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}
			}
		}
	} else if n, err := src.loc.Size(key); err == nil {
		v = cache.Version{Size: n}
	}
	b.seen[ref] = v
	return v
}

// locator is what the batch plans src through: with versions (b not nil)
// for a local array, src's Locator checked against them.
func (b *batchVersions) locator(src *source) zarr.Locator {
	if b == nil || src.dir == nil {
		return src.loc
	}
	return src.loc.Checked(func(key string) cache.Version { return b.of(src, key) })
}

// key returns the chunk cache's key for chunk c of src.
func (b *batchVersions) key(src *source, c *zarr.Chunk) chunkKey {
	object := src.uri + "\x00" + c.Key
	if src.dir != nil {
		if path, err := src.dir.Path(c.Key); err == nil {
			object = path
		}
	}
	return chunkKey{object: object, version: b.of(src, c.Key), offset: c.Offset, length: c.Length}
}
