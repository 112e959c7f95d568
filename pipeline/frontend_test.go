package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"iter"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEngine writes, for each sample of a batch, Box[0].Start as the first
// float32 of the sample's slice of the slot. It lets the API tests run
// without stores. gate, when set, holds each batch until a value arrives.
type fakeEngine struct {
	pool  *slotPool
	shape []int
	gate  chan struct{}
	fail  map[int64]error // batch id -> error
}

func (f *fakeEngine) reserve(shape []int) error {
	f.shape = shape
	n := 1
	for _, d := range shape {
		n *= d
	}
	var slots []*slot
	for i := range 2 {
		s := &slot{index: i, shape: append([]int64{4}, toInt64(shape)...), dtype: F32, host: make([]byte, 4*4*n)}
		slots = append(slots, s)
	}
	f.pool = newSlotPool(slots)
	return nil
}

func toInt64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

func (f *fakeEngine) run(ctx context.Context, reqs <-chan *batchReq, out chan<- *result) {
	for req := range reqs {
		if f.gate != nil {
			select {
			case <-f.gate:
			case <-ctx.Done():
				return
			}
		}
		r := &result{req: req}
		if err := req.err; err != nil {
			r.err = err
		} else if err := f.fail[req.id]; err != nil {
			r.err = err
		} else {
			s, err := f.pool.get(ctx)
			if err != nil {
				return
			}
			per := int(s.bytes(1))
			for i, smp := range req.samples {
				binary.LittleEndian.PutUint32(s.host[i*per:], math.Float32bits(float32(smp.Box[0].Start)))
			}
			r.slot = s
		}
		select {
		case out <- r:
		case <-ctx.Done():
			if r.slot != nil {
				r.slot.unref()
			}
			return
		}
	}
}

func (f *fakeEngine) headStage() stage  { return stageCompute }
func (f *fakeEngine) slotsInUse() int64 { return f.pool.inUse.Load() }
func (f *fakeEngine) close() error      { return nil }

func newFake(t *testing.T, cfg Config, f *fakeEngine) *Pipeline {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	p, err := start(cfg, f, new(statsSink))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func sample(start int64) Sample {
	return Sample{URI: "a", Box: []Range{{Start: start, Stop: start + 2}, {Start: 0, Stop: 3}}}
}

func firstValues(t *testing.T, b *Batch) []int64 {
	t.Helper()
	per := int(b.tensors[0].slot.bytes(1))
	var out []int64
	for i := range b.Len() {
		out = append(out, int64(math.Float32frombits(binary.LittleEndian.Uint32(b.Bytes()[i*per:]))))
	}
	return out
}

func TestPushPopOrderAndFlush(t *testing.T) {
	p := newFake(t, Config{BatchSize: 4, SampleShape: []int{2, 3}}, &fakeEngine{})
	for i := range 10 {
		if err := p.Push(sample(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := [][]int64{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}
	for i, w := range want {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("Pop %d: %v", i, err)
		}
		got := firstValues(t, b)
		if len(got) != len(w) || b.Info().Shape[0] != int64(len(w)) {
			t.Fatalf("batch %d: got %v (shape %v), want %v", i, got, b.Info().Shape, w)
		}
		for j := range w {
			if got[j] != w[j] {
				t.Fatalf("batch %d: got %v, want %v", i, got, w)
			}
		}
		if b.Info().ID != int64(i) {
			t.Errorf("batch %d has ID %d", i, b.Info().ID)
		}
		b.Release()
		b.Release() // idempotent
	}
	st := p.Stats()
	if st.BatchesEmitted != 3 || st.BatchesTruncated != 1 || st.SamplesEmitted != 10 || st.SamplesInFlight != 0 {
		t.Errorf("stats: %+v", st)
	}
}

func TestPushErrorsKeepEarlierSamples(t *testing.T) {
	p := newFake(t, Config{BatchSize: 2, SampleShape: []int{2, 3}}, &fakeEngine{})
	bad := Sample{URI: "a", Box: []Range{{Start: 0, Stop: 2}, {Start: 0, Stop: 4}}}
	err := p.Push(sample(1), sample(2), bad, sample(3))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Push with a bad extent: %v, want ErrInvalid", err)
	}
	if err := p.Push(Sample{URI: "a", Box: []Range{{Start: 0, Stop: 2}}}); !errors.Is(err, ErrRank) {
		t.Fatalf("Push with wrong rank: %v, want ErrRank", err)
	}
	if err := p.Push(Sample{Box: []Range{{Start: 0, Stop: 2}, {Start: 0, Stop: 3}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Push with empty URI: %v, want ErrInvalid", err)
	}
	b, err := p.Pop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := firstValues(t, b); got[0] != 1 || got[1] != 2 {
		t.Fatalf("got %v, want [1 2]", got)
	}
	b.Release()
}

func TestSampleShapeFromFirstPush(t *testing.T) {
	p := newFake(t, Config{BatchSize: 1}, &fakeEngine{})
	if err := p.Push(Sample{URI: "a", Box: []Range{{Start: 5, Stop: 9}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Push(Sample{URI: "a", Box: []Range{{Start: 0, Stop: 5}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second sample of another extent: %v, want ErrInvalid", err)
	}
	b, err := p.Pop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s := b.Info().Shape; len(s) != 2 || s[0] != 1 || s[1] != 4 {
		t.Fatalf("shape %v, want [1 4]", s)
	}
	b.Release()
}

func TestPushSeqIsLazy(t *testing.T) {
	p := newFake(t, Config{BatchSize: 2, SampleShape: []int{2, 3}, LookaheadBatches: 2}, &fakeEngine{})
	var mu sync.Mutex
	pulled := 0
	seq := func(yield func(Sample) bool) {
		for i := 0; ; i++ { // infinite
			mu.Lock()
			pulled++
			mu.Unlock()
			if !yield(sample(int64(i))) {
				return
			}
		}
	}
	if err := p.Push(sample(100)); err != nil {
		t.Fatal(err)
	}
	if err := p.PushSeq(seq); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := []int64{100, 0, 1, 2, 3, 4}
	var got []int64
	for b, err := range p.Batches(ctx, 3) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, firstValues(t, b)...)
		b.Release()
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// The sequence is pulled only as far as the lookahead, slots and the
	// stage buffers allow, never to its (infinite) end.
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	n := pulled
	mu.Unlock()
	if n > 64 {
		t.Fatalf("pulled %d samples from an infinite sequence: not lazy", n)
	}
	if !p.Pending() {
		t.Fatal("Pending() = false while an infinite sequence is queued")
	}
}

func TestPushSeqBadSampleFailsItsBatch(t *testing.T) {
	p := newFake(t, Config{BatchSize: 2, SampleShape: []int{2, 3}}, &fakeEngine{})
	seq := iter.Seq[Sample](func(yield func(Sample) bool) {
		_ = yield(sample(0)) && yield(Sample{URI: "a", Box: []Range{{Start: 0, Stop: 1}, {Start: 0, Stop: 3}}}) && yield(sample(9))
	})
	if err := p.PushSeq(seq); err != nil {
		t.Fatal(err)
	}
	if err := p.Push(sample(7), sample(8)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Pop(ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("first batch: %v, want ErrInvalid from the sequence's bad sample", err)
	}
	b, err := p.Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := firstValues(t, b); got[0] != 7 || got[1] != 8 {
		t.Fatalf("got %v, want the samples pushed after the sequence: [7 8]", got)
	}
	b.Release()
}

func TestBatchErrorDoesNotStopPipeline(t *testing.T) {
	boom := newError("decode", ErrDecode, "x/c/0", errors.New("bad frame"))
	p := newFake(t, Config{BatchSize: 1, SampleShape: []int{2, 3}}, &fakeEngine{fail: map[int64]error{1: boom}})
	if err := p.Push(sample(0), sample(1), sample(2)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, wantErr := range []error{nil, ErrDecode, nil} {
		b, err := p.Pop(ctx)
		if !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
			t.Fatalf("Pop %d: %v, want %v", i, err, wantErr)
		}
		if b != nil {
			b.Release()
		}
	}
}

func TestHoldingSeveralBatches(t *testing.T) {
	p := newFake(t, Config{BatchSize: 1, SampleShape: []int{2, 3}}, &fakeEngine{})
	if err := p.Push(sample(0), sample(1), sample(2)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := p.Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if firstValues(t, a)[0] != 0 || firstValues(t, b)[0] != 1 {
		t.Fatal("two held batches do not keep their own data")
	}
	if n := p.Stats().SlotsInUse; n != 2 {
		t.Fatalf("SlotsInUse = %d, want 2", n)
	}
	// Both slots are held: the third batch waits for a release.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.Pop(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pop with every slot held: %v, want DeadlineExceeded", err)
	}
	a.Release()
	c, err := p.Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if firstValues(t, c)[0] != 2 || firstValues(t, b)[0] != 1 {
		t.Fatal("slot reuse corrupted a held batch")
	}
	b.Release()
	c.Release()
}

func TestCloseDuringPop(t *testing.T) {
	before := runtime.NumGoroutine()
	f := &fakeEngine{gate: make(chan struct{})}
	cfg, _ := Config{BatchSize: 1, SampleShape: []int{2, 3}}.withDefaults()
	p, err := start(cfg, f, new(statsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(sample(0)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := p.Pop(context.Background())
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("Pop during Close: %v, want ErrShutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Pop still blocked after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.Push(sample(1)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Push after Close: %v, want ErrShutdown", err)
	}
	if _, err := p.Pop(context.Background()); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Pop after Close: %v, want ErrShutdown", err)
	}
	checkGoroutines(t, before)
}

func TestPopContextCancel(t *testing.T) {
	p := newFake(t, Config{BatchSize: 1, SampleShape: []int{2, 3}}, &fakeEngine{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if _, err := p.Pop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pop with a cancelled ctx: %v, want context.Canceled", err)
	}
}

// checkGoroutines fails when goroutines started by the test are still
// running a moment after everything was closed.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{BatchSize: -1}, "BatchSize"},
		{Config{SampleShape: []int{1, 0}}, "SampleShape[1]"},
		{Config{SampleShape: make([]int, 9)}, "SampleShape"},
		{Config{Dtype: 7}, "Dtype"},
		{Config{LookaheadBatches: 1}, "LookaheadBatches"},
		{Config{HostBufferBytes: 10}, "HostBufferBytes"},
		{Config{MaxBytesPerElement: 3}, "MaxBytesPerElement"},
		{Config{Device: "tpu"}, "Device"},
		{Config{MaxGPUMemoryBytes: -1}, "MaxGPUMemoryBytes"},
		{Config{ChunkCacheBytes: 4096}, "ChunkCacheBytes"},
		{Config{OnError: 2}, "OnError"},
	}
	for _, tt := range tests {
		_, err := tt.cfg.withDefaults()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Config."+tt.field) {
			t.Errorf("withDefaults(%+v) = %v, want ErrInvalid naming Config.%s", tt.cfg, err, tt.field)
		}
	}
	c, err := Config{}.withDefaults()
	if err != nil || c.BatchSize != DefaultBatchSize || c.LookaheadBatches != DefaultLookaheadBatches || c.IOThreads < 1 {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, s := range []string{"f32", "Float32", "bf16", "BFLOAT16"} {
		if _, err := ParseDtype(s); err != nil {
			t.Errorf("ParseDtype(%q): %v", s, err)
		}
	}
	if _, err := ParseDtype("f16"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseDtype(f16) = %v, want ErrInvalid", err)
	}
	for _, s := range []string{"", "raise", "skip"} {
		if e, err := ParseErrorPolicy(s); err != nil || (s != "" && e.String() != s) {
			t.Errorf("ParseErrorPolicy(%q) = %v, %v", s, e, err)
		}
	}
	if _, err := ParseErrorPolicy("ignore"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseErrorPolicy(ignore) = %v, want ErrInvalid", err)
	}
}

// A sequence blocked in its own code blocks neither Push nor Close, and is
// stopped once it returns.
func TestPushSeqBlockedSequence(t *testing.T) {
	f := &fakeEngine{}
	cfg, _ := Config{BatchSize: 1, SampleShape: []int{2, 3}}.withDefaults()
	p, err := start(cfg, f, new(statsSink))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	stopped := make(chan struct{})
	seq := func(yield func(Sample) bool) {
		defer close(stopped)
		if !yield(sample(0)) {
			return
		}
		<-release // blocks until the test lets it go
		yield(sample(1))
	}
	if err := p.PushSeq(seq); err != nil {
		t.Fatal(err)
	}
	b, err := p.Pop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	done := make(chan error)
	go func() { done <- p.Push(sample(5)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Push blocked behind a blocked sequence")
	}
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked behind a blocked sequence")
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the sequence was not stopped after Close")
	}
}

func TestShutdownDrains(t *testing.T) {
	p := newFake(t, Config{BatchSize: 4, SampleShape: []int{2, 3}}, &fakeEngine{})
	for i := range 6 {
		if err := p.Push(sample(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Nobody pops yet: Shutdown times out and leaves the pipeline open.
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with nothing popped: %v, want DeadlineExceeded", err)
	}
	if err := p.Push(sample(9)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Push after Shutdown: %v, want ErrShutdown", err)
	}
	done := make(chan error)
	go func() { done <- p.Shutdown(context.Background()) }()
	var got []int64
	for len(got) < 6 {
		b, err := p.Pop(context.Background())
		if err != nil {
			t.Fatalf("Pop during Shutdown: %v", err)
		}
		got = append(got, firstValues(t, b)...)
		b.Release()
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if len(got) != 6 || got[4] != 4 || got[5] != 5 {
		t.Fatalf("delivered %v, want 0..5 (the ragged last batch flushed)", got)
	}
	if _, err := p.Pop(context.Background()); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Pop after Shutdown: %v, want ErrShutdown", err)
	}
}
