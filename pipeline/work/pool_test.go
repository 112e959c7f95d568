package work

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	p := NewPool(3)
	defer p.Stop()
	if p.Size() != 3 {
		t.Fatalf("Size = %d", p.Size())
	}
	var ran atomic.Int64
	var mu sync.Mutex
	workers := map[int]bool{}
	err := p.Run(context.Background(), 100, func(i int) error {
		ran.Add(int64(i))
		return nil
	}, func(w int, start, end time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if workers[w] || end.Before(start) {
			t.Errorf("span of worker %d: twice, or %v before %v", w, end, start)
		}
		workers[w] = true
	})
	if err != nil || ran.Load() != 99*100/2 {
		t.Fatalf("Run: %v, sum of indexes %d; want nil, %d", err, ran.Load(), 99*100/2)
	}
	if len(workers) == 0 {
		t.Fatal("no worker spans")
	}
	boom := errors.New("boom")
	if err := p.Run(context.Background(), 10, func(i int) error {
		if i == 4 {
			return boom
		}
		return nil
	}, nil); err != boom {
		t.Fatalf("Run with a failing task: %v, want %v", err, boom)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx, 10, func(int) error { return nil }, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a done context: %v", err)
	}
}
