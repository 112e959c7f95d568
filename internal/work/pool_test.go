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

// TestPoolGrains runs every index exactly once, whatever the number of
// tasks per worker (grains of one up to maxGrain), with several Runs
// sharing the pool at once; and a Run canceled half way stops taking
// tasks and returns the context's error.
func TestPoolGrains(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		p := NewPool(workers)
		var wg sync.WaitGroup
		for _, n := range []int{0, 1, 7, 8*workers - 1, 8 * workers, 100, 8*maxGrain*workers + 13, 5000} {
			wg.Go(func() {
				counts := make([]atomic.Int32, n)
				if err := p.Run(context.Background(), n, func(i int) error {
					counts[i].Add(1)
					return nil
				}, nil); err != nil {
					t.Errorf("%d workers, %d tasks: %v", workers, n, err)
				}
				for i := range counts {
					if c := counts[i].Load(); c != 1 {
						t.Errorf("%d workers, %d tasks: task %d ran %d times", workers, n, i, c)
						return
					}
				}
			})
		}
		wg.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		var ran atomic.Int64
		err := p.Run(ctx, 10000, func(i int) error {
			if ran.Add(1) == 100 {
				cancel()
			}
			return nil
		}, nil)
		if !errors.Is(err, context.Canceled) || ran.Load() >= 10000 {
			t.Errorf("%d workers: canceled at task 100: %v after %d tasks", workers, err, ran.Load())
		}
		p.Stop()
	}
}
