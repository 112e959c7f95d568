package cache

import (
	"container/list"
	"sync"
)

// LRU is a fixed-capacity least-recently-used cache whose misses are
// single-flight: concurrent Gets of one missing key run load once. Errors
// are not cached. Its methods are safe for concurrent use.
type LRU[K comparable, V any] struct {
	mu       sync.Mutex
	capacity int
	evicted  func(K, V)
	order    *list.List // front = most recent; values are *lruEntry
	items    map[K]*list.Element
	loading  map[K]*lruCall[V]
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

type lruCall[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// NewLRU returns an empty cache of capacity entries. evicted,
// when not nil, is called, outside the cache's lock, for each entry the
// cache drops (to make room, or in Purge).
func NewLRU[K comparable, V any](capacity int, evicted func(K, V)) *LRU[K, V] {
	return &LRU[K, V]{capacity: capacity, evicted: evicted, order: list.New(), items: map[K]*list.Element{}, loading: map[K]*lruCall[V]{}}
}

// Get returns the cached value for k, or loads it. hit reports whether the
// value was cached (or being loaded by another caller).
func (c *LRU[K, V]) Get(k K, load func() (V, error)) (v V, hit bool, err error) {
	c.mu.Lock()
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		v = e.Value.(*lruEntry[K, V]).val
		c.mu.Unlock()
		return v, true, nil
	}
	if call, ok := c.loading[k]; ok {
		c.mu.Unlock()
		<-call.done
		return call.val, true, call.err
	}
	call := &lruCall[V]{done: make(chan struct{})}
	c.loading[k] = call
	c.mu.Unlock()

	call.val, call.err = load()

	c.mu.Lock()
	delete(c.loading, k)
	var dropped []*lruEntry[K, V]
	if call.err == nil {
		if e, ok := c.items[k]; ok { // Put while loading: the load wins
			c.order.Remove(e)
		}
		c.items[k] = c.order.PushFront(&lruEntry[K, V]{k, call.val})
		dropped = c.trimLocked()
	}
	c.mu.Unlock()
	close(call.done)
	c.drop(dropped)
	return call.val, false, call.err
}

// Peek returns the cached value for k without loading it or changing its
// recency.
func (c *LRU[K, V]) Peek(k K) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		return e.Value.(*lruEntry[K, V]).val, true
	}
	return v, false
}

// Put caches v for k as the most recently used entry, replacing what k
// held (which is not passed to evicted) and evicting the least recently
// used entries over capacity.
func (c *LRU[K, V]) Put(k K, v V) {
	c.mu.Lock()
	if e, ok := c.items[k]; ok {
		e.Value.(*lruEntry[K, V]).val = v
		c.order.MoveToFront(e)
		c.mu.Unlock()
		return
	}
	c.items[k] = c.order.PushFront(&lruEntry[K, V]{k, v})
	dropped := c.trimLocked()
	c.mu.Unlock()
	c.drop(dropped)
}

// Remove drops k's entry, if cached, passing it to evicted. A load of k
// still running is not waited for: what it loads is cached when it
// finishes.
func (c *LRU[K, V]) Remove(k K) {
	c.mu.Lock()
	e, ok := c.items[k]
	if !ok {
		c.mu.Unlock()
		return
	}
	delete(c.items, k)
	old := c.order.Remove(e).(*lruEntry[K, V])
	c.mu.Unlock()
	c.drop([]*lruEntry[K, V]{old})
}

// trimLocked evicts the least recently used entries over capacity and
// returns them, for drop once the lock is released.
func (c *LRU[K, V]) trimLocked() []*lruEntry[K, V] {
	var dropped []*lruEntry[K, V]
	for c.order.Len() > c.capacity {
		old := c.order.Remove(c.order.Back()).(*lruEntry[K, V])
		delete(c.items, old.key)
		dropped = append(dropped, old)
	}
	return dropped
}

// Purge drops every cached entry. Loads still running are not waited for:
// what they load is cached when they finish.
func (c *LRU[K, V]) Purge() {
	c.mu.Lock()
	var dropped []*lruEntry[K, V]
	for e := c.order.Front(); e != nil; e = e.Next() {
		dropped = append(dropped, e.Value.(*lruEntry[K, V]))
	}
	c.order.Init()
	clear(c.items)
	c.mu.Unlock()
	c.drop(dropped)
}

func (c *LRU[K, V]) drop(entries []*lruEntry[K, V]) {
	if c.evicted == nil {
		return
	}
	for _, e := range entries {
		c.evicted(e.key, e.val)
	}
}
