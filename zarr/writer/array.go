package writer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/damacy-go/damacy/zarr"
)

// Array is an array being written. Its methods may be called from several
// goroutines at once, as long as they write different blocks.
type Array struct {
	dir string
	l   *layout
	// blockEncoders and chunkEncoders hold encoding scratch, all Go heap.
	blockEncoders, chunkEncoders sync.Pool
	// slots bounds the chunks being encoded at once, over all calls, to
	// GOMAXPROCS at creation, and with it the chunk encoders in use.
	slots chan struct{}
}

// Create validates spec and writes the array's metadata into dir, creating
// dir if needed. If dir already holds zarr metadata (zarr.json, .zarray or
// .zgroup), it must be byte for byte what spec gives, so that an interrupted
// generation can be resumed; otherwise Create fails with ErrExists. Create
// removes no chunk: rewriting a block replaces its object, and with
// SkipEmptyChunks an all-fill block removes it.
func Create(dir string, spec Spec) (*Array, error) {
	l, err := spec.resolve()
	if err != nil {
		return nil, err
	}
	files, err := l.metadata()
	if err != nil {
		return nil, err
	}
	if err := writeMetadata(dir, files); err != nil {
		return nil, err
	}
	return newArray(dir, l), nil
}

func newArray(dir string, l *layout) *Array {
	a := &Array{dir: dir, l: l, slots: make(chan struct{}, runtime.GOMAXPROCS(0))}
	a.blockEncoders.New = func() any { return new(blockEncoder) }
	a.chunkEncoders.New = func() any { return newChunkEncoder(l) }
	return a
}

// writeMetadata writes the metadata files into dir, after checking that dir
// holds no other zarr node.
func writeMetadata(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	for _, name := range []string{"zarr.json", ".zarray", ".zgroup", ".zattrs"} {
		old, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writer: %w", err)
		}
		if !bytes.Equal(old, files[name]) {
			return fmt.Errorf("writer: %s: %s: %w", dir, name, ErrExists)
		}
	}
	for name, b := range files {
		if err := writeFile(filepath.Join(dir, name), [][]byte{b}); err != nil {
			return err
		}
	}
	return nil
}

// Dir returns the directory the array is written to.
func (a *Array) Dir() string { return a.dir }

// Spec returns a copy of the array's spec with defaults filled in (Format,
// Order, Separator).
func (a *Array) Spec() Spec {
	s := a.l.spec
	s.Shape = slices.Clone(s.Shape)
	s.ChunkShape = slices.Clone(s.ChunkShape)
	s.ShardShape = slices.Clone(s.ShardShape)
	s.DimensionNames = slices.Clone(s.DimensionNames)
	s.Attributes = maps.Clone(s.Attributes)
	return s
}

// NumBlocks returns the number of blocks: the shards of a sharded array, the
// chunks of an unsharded one.
func (a *Array) NumBlocks() int { return a.l.nblocks }

// Blocks yields the index and region of every block in C order of the block
// grid, each region clipped to the array's shape.
func (a *Array) Blocks() iter.Seq2[int, []zarr.Range] {
	return func(yield func(int, []zarr.Range) bool) {
		for i := range a.l.nblocks {
			if !yield(i, a.block(i)) {
				return
			}
		}
	}
}

// block returns the region of block i, 0 <= i < nblocks.
func (a *Array) block(i int) []zarr.Range {
	l := a.l
	box := make([]zarr.Range, len(l.grid))
	n := int64(i)
	for d := len(l.grid) - 1; d >= 0; d-- {
		g := n % l.grid[d]
		n /= l.grid[d]
		box[d].Start = g * l.block[d]
		box[d].Stop = min(box[d].Start+l.block[d], l.spec.Shape[d])
	}
	return box
}

// WriteRegion writes data, the elements of box in C order, little-endian.
// box must cover whole blocks: each Start a multiple of the block shape
// (ShardShape, or ChunkShape when unsharded), each Stop one too or the
// array's extent. Each block in box is encoded and stored once; blocks, and
// the chunks of a block, are encoded by up to GOMAXPROCS goroutines. Calls
// for disjoint boxes may run concurrently; together they still encode at
// most GOMAXPROCS chunks at a time.
func (a *Array) WriteRegion(box []zarr.Range, data []byte) error {
	l := a.l
	if len(box) != len(l.block) {
		return fmt.Errorf("writer: %s: region has %d dimensions; the array has %d: %w", a.dir, len(box), len(l.block), ErrInvalid)
	}
	lo := make([]int64, len(box))
	hi := make([]int64, len(box))
	nblocks := 1
	want := l.ti.size
	for d, r := range box {
		if r.Start < 0 || r.Stop > l.spec.Shape[d] || r.Start >= r.Stop ||
			r.Start%l.block[d] != 0 || r.Stop%l.block[d] != 0 && r.Stop != l.spec.Shape[d] {
			return fmt.Errorf("writer: %s: region [%d, %d) in dimension %d is not a block-aligned part of [0, %d) with blocks of %d: %w",
				a.dir, r.Start, r.Stop, d, l.spec.Shape[d], l.block[d], ErrInvalid)
		}
		lo[d] = r.Start / l.block[d]
		hi[d] = ceilDiv(r.Stop, l.block[d])
		nblocks *= int(hi[d] - lo[d])
		want *= int(r.Stop - r.Start)
	}
	if len(data) != want {
		return fmt.Errorf("writer: %s: region data is %d bytes; want %d: %w", a.dir, len(data), want, ErrInvalid)
	}
	src := source{box: box, data: data}
	workers := runtime.GOMAXPROCS(0)
	p := chunkParallelism(workers, nblocks)
	return parallel(context.Background(), nblocks, workers, func() (func(int) error, func()) {
		e := a.blockEncoders.Get().(*blockEncoder)
		return func(k int) error {
				// Block k of the region, in C order of its sub-grid.
				g := make([]int64, len(lo))
				n := int64(k)
				for d := len(lo) - 1; d >= 0; d-- {
					span := hi[d] - lo[d]
					g[d] = lo[d] + n%span
					n /= span
				}
				return a.writeBlock(e, g, src, p)
			}, func() {
				a.blockEncoders.Put(e)
			}
	})
}

// WriteFrom writes every block of the array with data from src, which must
// fill dst with the elements of box (C order, little-endian), as
// Synth.Fill does. src is called once per chunk (the inner chunks of a
// sharded array) with the chunk's box clipped to the array, from several
// goroutines at once: it must be safe for concurrent use. Up to workers
// goroutines (0 means GOMAXPROCS) each write one block at a time and share
// the chunks of their blocks with the spare goroutines when there are
// fewer blocks than workers. Memory is about one chunk per goroutine plus
// one compressed block per block in progress. The first error stops the
// work and is returned, as is ctx.Err() if ctx ends first.
func (a *Array) WriteFrom(ctx context.Context, workers int, src func(dst []byte, box []zarr.Range) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := chunkParallelism(workers, a.l.nblocks)
	return parallel(ctx, a.l.nblocks, workers, func() (func(int) error, func()) {
		e := a.blockEncoders.Get().(*blockEncoder)
		return func(i int) error {
				box := a.block(i)
				g := make([]int64, len(box))
				for d, r := range box {
					g[d] = r.Start / a.l.block[d]
				}
				return a.writeBlock(e, g, source{fn: src}, p)
			}, func() {
				a.blockEncoders.Put(e)
			}
	})
}

// source is where a block's data comes from: a region of the array in
// memory, or a function that fills any box.
type source struct {
	box  []zarr.Range // the region, C order, little-endian
	data []byte
	fn   func(dst []byte, box []zarr.Range) error
}

// parallel runs n jobs, 0..n-1, on up to workers goroutines. start makes
// one worker's job function and its cleanup. The first error cancels the
// rest and is returned; if ctx ends before every job is done, the work stops
// between jobs and ctx's error is returned.
func parallel(ctx context.Context, n, workers int, start func() (job func(int) error, done func())) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, finished atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			job, done := start()
			defer done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := job(i); err != nil {
					cancel(err)
					return
				}
				finished.Add(1)
			}
		})
	}
	wg.Wait()
	if finished.Load() == int64(n) {
		return nil
	}
	return context.Cause(ctx)
}

// key returns the storage key of the block at grid position g.
func (a *Array) key(g []int64) string {
	s := &a.l.spec
	var b strings.Builder
	if s.Format == 3 && !s.V2Keys {
		b.WriteString("c")
		b.WriteString(s.Separator)
	}
	for d, n := range g {
		if d > 0 {
			b.WriteString(s.Separator)
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	return b.String()
}

// chunkParallelism is how many goroutines encode the chunks of each block
// when workers goroutines write nblocks blocks: the workers left over once
// each block has one, so that arrays of a few large shards use every core.
func chunkParallelism(workers, nblocks int) int {
	return max(1, workers/max(1, min(workers, nblocks)))
}

// writeBlock encodes the block at grid position g from src, which covers
// it, with up to p goroutines, and stores or (when it is all fill and
// skipped) removes its object.
func (a *Array) writeBlock(e *blockEncoder, g []int64, src source, p int) error {
	key := a.key(g)
	obj, err := a.encodeBlock(e, g, src, p)
	if err != nil {
		return fmt.Errorf("writer: %s: block %s: %w", a.dir, key, err)
	}
	path := filepath.Join(a.dir, filepath.FromSlash(key))
	if len(obj) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("writer: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	return writeFile(path, obj)
}

// writeFile writes the pieces, in order, to path through a temporary file
// in the same directory, renamed into place, so that a reader never sees
// part of it.
func writeFile(path string, pieces [][]byte) error {
	var f *os.File
	var err error
	for range 10 { // a name another writer took is tried again
		tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%016x.tmp", filepath.Base(path), rand.Uint64()))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	// Small pieces are gathered into larger writes; large ones go straight
	// through.
	total := 0
	for _, p := range pieces {
		total += len(p)
	}
	w := bufio.NewWriterSize(f, min(total, 1<<20))
	for _, p := range pieces {
		if _, err = w.Write(p); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writer: %w", err)
	}
	return nil
}

// boxBytes is the size of box's data.
func boxBytes(box []zarr.Range, size int) int {
	n := size
	for _, r := range box {
		n *= int(r.Stop - r.Start)
	}
	return n
}
