package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// A file is mapped once preads have fetched as many bytes as it holds;
// files above a quarter of the budget, and empty ones, never are.
func TestFileMapsNote(t *testing.T) {
	m := newFileMaps(0, 1000)
	if m.note("a", 100, 200) {
		t.Error("a file read half is hot")
	}
	if !m.note("a", 100, 200) {
		t.Error("a file read whole is not hot")
	}
	for _, n := range []int64{10, 1000} {
		if m.note("big", n, 251) {
			t.Errorf("a file above a quarter of the budget is hot after %d bytes", n)
		}
	}
	if m.note("empty", 10, 0) {
		t.Error("an empty file is hot")
	}
	if !m.note("b", 250, 250) {
		t.Error("a file of a quarter of the budget read whole is not hot")
	}
}

// A read seen for the first time maps its file (add with covered) only
// when it covers a quarter of the file or more and the file is within a
// quarter of the budget; add without covered maps any file that fits.
func TestFileMapsFirstSight(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	m := newFileMaps(0, 4000)
	defer m.close()
	small, big := file("small", 400), file("big", 1001)
	for _, c := range []struct {
		path    string
		covered int64
		mapped  bool
	}{
		{small, 99, false}, {small, 100, true}, {big, 1001, false}, {file("whole", 1000), 0, true},
	} {
		mapped, err := m.add(c.path, c.covered)
		if err != nil {
			t.Fatal(err)
		}
		f := m.acquire(c.path)
		if (f != nil) != c.mapped || mapped != c.mapped {
			t.Errorf("%s, %d bytes covered: mapped %v (add said %v), want %v", filepath.Base(c.path), c.covered, f != nil, mapped, c.mapped)
		}
		if f != nil {
			m.release(f)
		}
	}
	if got := m.mapped(); got != 1400 {
		t.Errorf("%d bytes mapped, want 1400", got)
	}
}

// Both engines map a file the first time they read a large chunk of it
// (firstSightBytes; the CUDA engine registers the mapping and copies to
// the GPU from it): a single pass over uncompressed chunks of 2 MiB, of
// an unsharded array or in shards, copies every one from its mapping,
// and its batches are those of the host engine without mappings, bit for
// bit; chunks below the threshold are read into staging the first time
// (and mapped once read whole, fileMaps.note), and so are the CUDA
// engine's compressed ones (firstSightRaw).
func TestFirstSightMaps(t *testing.T) {
	for _, engine := range []string{"cpu", "cuda"} {
		t.Run(engine, func(t *testing.T) { testFirstSightMaps(t, engine) })
	}
}

// newOn starts a pipeline of cfg on engine "cpu" (the host engine) or
// "cuda" (GPU 0; withNVCOMP: nvCOMP must load).
func newOn(t *testing.T, engine string, cfg Config, withNVCOMP bool) *Pipeline {
	t.Helper()
	if engine == "cpu" {
		cfg.Device = "cpu"
		return newChecked(t, cfg)
	}
	return newCUDAPipeline(t, cfg, withNVCOMP)
}

func testFirstSightMaps(t *testing.T, engine string) {
	if engine == "cuda" {
		cudatest.MustHaveGPU(t)
	}
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	large := writeCase(t, dir, storeCase{"raw-u16-2MiB", writer.Spec{Shape: []int64{48, 128, 256}, ChunkShape: []int64{32, 128, 256},
		DataType: zarr.Uint16, Compression: writer.Compression{}}}, seed)
	small := writeCase(t, dir, storeCase{"raw-u16-32KiB", writer.Spec{Shape: []int64{48, 128, 256}, ChunkShape: []int64{8, 16, 128},
		DataType: zarr.Uint16, Compression: writer.Compression{}}}, seed+1)
	packed := writeCase(t, dir, storeCase{"zstd-u32-4MiB", writer.Spec{Shape: []int64{64, 128, 256}, ChunkShape: []int64{32, 128, 256},
		DataType: zarr.Uint32, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}}, seed+2)
	sharded := writeCase(t, dir, storeCase{"raw-u16-sharded", writer.Spec{Shape: []int64{64, 128, 256}, ChunkShape: []int64{32, 128, 256},
		ShardShape: []int64{64, 128, 256}, DataType: zarr.Uint16, Compression: writer.Compression{}}}, seed+3)
	rng := rand.New(rand.NewPCG(seed, 13))
	ext := []int{20, 100, 200}
	for _, c := range []struct {
		path   string
		mapped bool
	}{{large, true}, {small, false}, {packed, engine == "cpu"}, {sharded, true}} {
		epochs := epochSamples(t, rng, []string{c.path}, ext, 8, 1)
		cfg := Config{Device: "cpu", BatchSize: 4, SampleShape: ext, Dtype: F32, HostBufferBytes: 24 << 20, DeviceBufferBytes: 8 << 20}
		off := cfg
		off.MappedFileBytes = -1
		want := runEpochs(t, newChecked(t, off), epochs)
		got := runEpochs(t, newOn(t, engine, cfg, false), epochs)
		compareRuns(t, got, want, epochs, cfg.BatchSize)
		st := got.stats[0]
		// Mapped: all but a read too short for first sight (the
		// compressed array has one of 832 bytes); not mapped: at least
		// each file's first read was pread.
		all := float64(st.BytesMapped) >= 0.99*float64(st.BytesRead)
		if all != c.mapped || st.BytesRead == 0 {
			t.Errorf("%s: %d of %d bytes read copied from mappings in one pass; want all %v", filepath.Base(c.path), st.BytesMapped, st.BytesRead, c.mapped)
		}
	}
}

// h2dCopies must put into the wave buffer's staging exactly what one copy
// of a slab holding every read would: each read's file bytes at its slab
// offset, each part's CPU-decoded chunks after its reads, and the slab's
// bytes from meta to used; never outside [0, used) and never two copies on
// one byte. Mapped neighbours merge. A wave carries one to three parts,
// each starting where the one before ends.
func TestH2DCopies(t *testing.T) {
	seed := zarrtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := range 300 {
		files := make([]*fileMap, 3)
		for i := range files {
			files[i] = &fileMap{data: randomBytes(rng, 1<<14)}
		}
		slab := randomBytes(rng, 1<<17)
		cw := &cudaWave{}
		at := int64(0)
		any := false
		type span struct{ from, to int64 }
		var cpu []span
		for range 1 + rng.IntN(3) {
			p := &wavePart{wave: &wave{slabAt: at}}
			fileOf := make([]int, 0)
			for range rng.IntN(12) {
				f := rng.IntN(len(files))
				off, n := rng.Int64N(1<<13), 1+rng.Int64N(1<<10)
				if k := len(p.reads); k > 0 && fileOf[k-1] == f && rng.IntN(2) == 0 {
					// Continues the previous read in both the file and
					// the slab (gap equal in both).
					q := p.reads[k-1]
					gap := rng.Int64N(300)
					off = q.offset + q.length + gap
					at = q.slabOff + q.length + gap
					if off+n > 1<<14 {
						continue
					}
				}
				p.reads = append(p.reads, readOp{offset: off, length: n, slabOff: at})
				fileOf = append(fileOf, f)
				at = align(at + n)
			}
			p.mapped = make([]*fileMap, len(p.reads))
			for i := range p.reads {
				if rng.IntN(3) > 0 {
					p.mapped[i] = files[fileOf[i]]
					any = true
				}
			}
			p.slabEnd = at + align(rng.Int64N(1<<11)) // the part's CPU-decoded chunks
			cpu = append(cpu, span{at, p.slabEnd})
			at = p.slabEnd
			cw.parts = append(cw.parts, p)
		}
		if !any {
			continue
		}
		meta := at
		used := meta + rng.Int64N(1<<12)
		want := make([]byte, used)
		defined := make([]bool, used)
		nreads := 0
		for _, p := range cw.parts {
			nreads += len(p.reads)
			for i, r := range p.reads {
				src := slab[r.slabOff : r.slabOff+r.length]
				if f := p.mapped[i]; f != nil {
					src = f.data[r.offset : r.offset+r.length]
				}
				copy(want[r.slabOff:], src)
				for k := r.slabOff; k < r.slabOff+r.length; k++ {
					defined[k] = true
				}
			}
		}
		for _, c := range append(cpu, span{meta, used}) {
			copy(want[c.from:c.to], slab[c.from:c.to])
			for k := c.from; k < c.to; k++ {
				defined[k] = true
			}
		}
		got := make([]byte, used)
		written := make([]bool, used)
		const base = 1 << 40 // a wave buffer's device address
		copies := cw.h2dCopies(slab, base, meta, used)
		for _, c := range copies {
			dst := int64(c.Dst) - base
			if dst < 0 || dst+int64(len(c.Src)) > used {
				t.Fatalf("round %d: copy of %d bytes to %d outside [0, %d)", round, len(c.Src), dst, used)
			}
			for k := dst; k < dst+int64(len(c.Src)); k++ {
				if written[k] {
					t.Fatalf("round %d: byte %d copied twice", round, k)
				}
				written[k] = true
			}
			copy(got[dst:], c.Src)
		}
		for k := range used {
			if defined[k] && (!written[k] || got[k] != want[k]) {
				t.Fatalf("round %d: staging byte %d: written %v, %d, want %d", round, k, written[k], got[k], want[k])
			}
		}
		if len(copies) > nreads+len(cw.parts)+1 {
			t.Fatalf("round %d: %d copies for %d reads in %d parts", round, len(copies), nreads, len(cw.parts))
		}
	}
}

// A mapped file truncated under its mapping gives ErrStorage from
// readMapped rather than a crash; other panics pass through.
func TestReadMappedTruncated(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("files are mapped on Linux only")
	}
	path := filepath.Join(t.TempDir(), "shard")
	if err := os.WriteFile(path, bytes.Repeat([]byte{7}, 3*os.Getpagesize()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := mapFile(f, int64(3*os.Getpagesize()))
	if err != nil {
		t.Fatal(err)
	}
	defer unmapFile(mem)
	if err := readMapped(func() error {
		if mem[len(mem)-1] != 7 {
			return errors.New("wrong byte")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var b byte
	err = readMapped(func() error { b = mem[len(mem)-1]; return nil })
	if !errors.Is(err, ErrStorage) {
		t.Fatalf("reading a truncated mapping: %v (byte %d); want ErrStorage", err, b)
	}
	defer func() {
		if r := recover(); r != "other" {
			t.Errorf("recovered %v, want the panic to pass through", r)
		}
	}()
	_ = readMapped(func() error { panic("other") })
}

// Both engines map the files epochs read again and read their chunks
// straight from the mappings (the CUDA engine copies them to the GPU, the
// host engine decodes them in place): the batches are the host engine's
// without mappings, bit for bit, with mappings on (the default budget,
// and one too small for every file, so that mappings are dropped and made
// again) and off; mapped bytes never exceed the budget; and a file
// truncated under its mapping fails its batch with ErrStorage instead of
// crashing.
func TestMappedFiles(t *testing.T) {
	for _, engine := range []string{"cpu", "cuda"} {
		t.Run(engine, func(t *testing.T) { testMappedFiles(t, engine) })
	}
}

func testMappedFiles(t *testing.T, engine string) {
	if engine == "cuda" {
		cudatest.MustHaveGPU(t)
	}
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	paths := writeCacheCases(t, dir, seed)
	rng := rand.New(rand.NewPCG(seed, 12))
	ext := []int{20, 24, 17}
	epochs := epochSamples(t, rng, paths, ext, 48, 4)
	cfg := Config{BatchSize: 6, SampleShape: ext, Dtype: F32, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 64 << 10}
	hcfg := cfg
	hcfg.Device, hcfg.MappedFileBytes = "cpu", -1
	want := runEpochs(t, newChecked(t, hcfg), epochs)
	var largest int64
	for _, p := range paths {
		filepath.WalkDir(p, func(_ string, d fs.DirEntry, _ error) error {
			if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
				largest = max(largest, fi.Size())
			}
			return nil
		})
	}
	for _, budget := range []int64{-1, 0, 4 * largest} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			c := cfg
			c.MappedFileBytes = budget
			p := newOn(t, engine, c, true)
			got := runEpochs(t, p, epochs)
			compareRuns(t, got, want, epochs, cfg.BatchSize)
			last := got.stats[len(got.stats)-1]
			t.Logf("last epoch: %d bytes read, %d of them mapped; %d bytes mapped", last.BytesRead, last.BytesMapped, last.MappedFileBytes)
			switch {
			case budget < 0 && (last.BytesMapped != 0 || last.MappedFileBytes != 0):
				t.Errorf("mappings off: %d bytes mapped, %d copied from mappings", last.MappedFileBytes, last.BytesMapped)
			case budget >= 0 && last.BytesMapped == 0:
				t.Errorf("budget %d: the last epoch copied nothing from mapped files", budget)
			case budget > 0 && last.MappedFileBytes > budget:
				t.Errorf("budget %d: %d bytes mapped", budget, last.MappedFileBytes)
			}
		})
	}
	// Truncate every file under its mappings: the next batches fail with
	// ErrStorage (or ErrDecode, for a file shorter than its index says,
	// where a read finds it so), and nothing crashes.
	p := newOn(t, engine, cfg, true)
	got := runEpochs(t, p, epochs[:3])
	if last := got.stats[len(got.stats)-1]; last.BytesMapped == 0 {
		t.Fatal("nothing mapped after three epochs")
	}
	for _, path := range paths {
		filepath.WalkDir(path, func(f string, d fs.DirEntry, _ error) error {
			if d.Type().IsRegular() && d.Name() != "zarr.json" {
				if err := os.Truncate(f, 0); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		})
	}
	pushAll(t, p, epochs[3]...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every batch reports, failed or not; the later ones may have taken a
	// slot before failing, and give it back.
	failed := 0
	for i := 0; i < (len(epochs[3])+cfg.BatchSize-1)/cfg.BatchSize; i++ {
		b, err := p.Pop(ctx)
		if err != nil {
			if !errors.Is(err, ErrStorage) && !errors.Is(err, ErrDecode) {
				t.Fatalf("batch %d of truncated files: %v; want ErrStorage or ErrDecode", i, err)
			}
			if failed == 0 {
				t.Logf("batch %d of truncated files: %v", i, err)
			}
			failed++
			continue
		}
		b.Release()
	}
	if failed == 0 {
		t.Fatal("every batch of truncated files succeeded")
	}
}

// randomBytes returns n random bytes.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
