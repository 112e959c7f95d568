package cache

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLRU(t *testing.T) {
	var evicted []int
	c := NewLRU(2, func(k int, v string) { evicted = append(evicted, k) })
	load := func(v string) func() (string, error) { return func() (string, error) { return v, nil } }
	for _, k := range []int{1, 2} {
		if _, hit, _ := c.Get(k, load("v")); hit {
			t.Fatalf("Get(%d) of an empty cache hit", k)
		}
	}
	if v, hit, _ := c.Get(1, load("other")); !hit || v != "v" {
		t.Fatalf("Get(1) = %q, hit %v; want the cached v", v, hit)
	}
	c.Get(3, load("v")) // evicts 2, the least recently used
	if len(evicted) != 1 || evicted[0] != 2 {
		t.Fatalf("evicted %v; want [2]", evicted)
	}
	boom := errors.New("boom")
	if _, _, err := c.Get(4, func() (string, error) { return "", boom }); err != boom {
		t.Fatalf("Get of a failing load: %v", err)
	}
	if _, hit, err := c.Get(4, load("v")); hit || err != nil {
		t.Fatalf("a failed load was cached: hit %v, %v", hit, err)
	}
	c.Purge()
	if len(evicted) != 4 {
		t.Fatalf("after Purge, evicted %v; want 2, 1 or 3, 4", evicted)
	}
	if _, hit, _ := c.Get(3, load("v")); hit {
		t.Fatal("an entry survived Purge")
	}
}

// TestLRUSingleFlight: concurrent Gets of one missing key load it once.
func TestLRUSingleFlight(t *testing.T) {
	c := NewLRU[string, int](4, nil)
	var loads atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, _, err := c.Get("k", func() (int, error) {
				loads.Add(1)
				<-release
				return 7, nil
			})
			if v != 7 || err != nil {
				t.Errorf("Get = %d, %v", v, err)
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads of one key; want 1", n)
	}
}

// TestLRUPutRemovePeek: Put replaces without calling evicted and evicts
// over capacity; Remove calls evicted; Peek neither loads nor changes
// recency.
func TestLRUPutRemovePeek(t *testing.T) {
	var evicted []int
	c := NewLRU(2, func(k int, v string) { evicted = append(evicted, k) })
	c.Put(1, "a")
	c.Put(2, "b")
	c.Put(1, "a2") // replaces; 1 is now the most recent
	if v, ok := c.Peek(1); !ok || v != "a2" {
		t.Fatalf("Peek(1) = %q, %v; want a2, true", v, ok)
	}
	if len(evicted) != 0 {
		t.Fatalf("Put of a present key evicted %v", evicted)
	}
	c.Peek(2) // does not make 2 recent
	c.Put(3, "c")
	if len(evicted) != 1 || evicted[0] != 2 {
		t.Fatalf("evicted %v; want [2]", evicted)
	}
	if _, ok := c.Peek(2); ok {
		t.Fatal("Peek found an evicted key")
	}
	c.Remove(1)
	c.Remove(42) // absent: nothing
	if len(evicted) != 2 || evicted[1] != 1 {
		t.Fatalf("evicted %v; want [2 1]", evicted)
	}
	if _, hit, _ := c.Get(1, func() (string, error) { return "x", nil }); hit {
		t.Fatal("Get of a removed key hit")
	}
}
