package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// The CUDA engine's preparation of a wave (checks, routing, CPU decoding)
// runs on the host: these tests drive it on a wave read into a plain slab,
// without a GPU. withNVCOMP makes the routing the GPU's (its decoders are
// never called): zstd, lz4 and blosclz chunks become entries, the chunks
// GPUStreams refuses spill.

// prepareArrays writes the arrays of the preparation tests: raw uint16 in
// shards and raw float64 (read in place, with no room for a copy); blosc
// blosclz with bit shuffle (the blosclz kernel's) in 1 MiB chunks of two
// blocks; blosc zstd in blocks of a KiB; blosc zlib in one 64^3 chunk of
// 64 KiB blocks (no GPU decoder takes it: split on the CPU under either
// routing); blosc lz4 with byte shuffle in shards (one block a chunk);
// zstd with a checksum. The blosclz array is 64x128x128, the others 64^3
// in 16^3 chunks but where said.
func prepareArrays(t *testing.T, seed uint64) []string {
	dir := t.TempDir()
	var paths []string
	for i, c := range []struct {
		name  string
		dt    zarr.DataType
		c     writer.Compression
		chunk []int64
		shard bool
	}{
		{"raw", zarr.Uint16, writer.Compression{}, nil, true},
		{"raw-f64", zarr.Float64, writer.Compression{}, nil, false},
		{"blosclz", zarr.Uint16, writer.Compression{Codec: writer.Blosc, Level: 9, BloscCompressor: blosc.BloscLZ, Shuffle: blosc.BitShuffle}, []int64{32, 128, 128}, false},
		{"blosc-zstd", zarr.Uint16, writer.Compression{Codec: writer.Blosc, Level: 3, BloscCompressor: blosc.Zstd, Shuffle: blosc.NoShuffle, Blocksize: 1024}, nil, false},
		{"blosc-zlib", zarr.Uint16, writer.Compression{Codec: writer.Blosc, Level: 3, BloscCompressor: blosc.Zlib, Shuffle: blosc.NoShuffle, Blocksize: 1024}, []int64{64, 64, 64}, false},
		{"blosc-lz4", zarr.Float32, writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.ByteShuffle}, nil, true},
		{"zstd", zarr.Uint16, writer.Compression{Codec: writer.Zstd, Level: 1, Checksum: true}, nil, false},
	} {
		chunk := c.chunk
		if chunk == nil {
			chunk = []int64{16, 16, 16}
		}
		sc := storeCase{name: c.name, spec: writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: chunk, DataType: c.dt, Compression: c.c}}
		if chunk[1] > 64 {
			sc.spec.Shape = []int64{64, 128, 128}
		}
		if c.shard {
			sc.spec.ShardShape = []int64{32, 32, 16}
		}
		if c.name != "blosclz" {
			paths = append(paths, writeCase(t, dir, sc, seed+uint64(i)))
			continue
		}
		// The zarr benchmark's values: they compress, so the blocks are
		// not stored as they are (memcpyed, where the shuffle is moot).
		paths = append(paths, writeBenchmarkArray(t, filepath.Join(dir, c.name), sc.spec))
	}
	return paths
}

// prepareEngine is a CUDA engine with no GPU behind it, for prepare's
// host side: its stages, wave limits and one wave buffer's arena offset,
// splitting any chunk of several blosc blocks (tinySplit).
func prepareEngine(t *testing.T, withNVCOMP bool) *cudaEngine {
	cfg, err := Config{BatchSize: 4, SampleShape: []int{20, 18, 12}, ComputeThreads: 3, IOThreads: 2, MappedFileBytes: -1,
		HostBufferBytes: 48 << 20, DeviceBufferBytes: 32 << 20}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	st, err := newStages(cfg, new(statsSink), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.close)
	st.split = tinySplit
	st.lim = waveLimits{slab: 16 << 20, arena: 16 << 20, jobs: maxWaveJobs, ops: maxWaveOps, opCost: opBytes, readCap: 64 << 10, readGap: 4 << 10}
	e := &cudaEngine{stages: st, nvMax: nvcompEntryBytes, inAlign: 1, bufs: []*waveBuf{{arena: 16 << 20}}}
	if withNVCOMP {
		e.zstd = new(nvcomp.Decoder)
	}
	return e
}

// prepareWave plans batches of samples over paths (BatchSize each, batch
// b's from paths[2b:], wrapping), each joining the wave before, and reads
// the one wave they make into a slab poisoned first.
func prepareWave(t *testing.T, e *cudaEngine, paths []string, batches int) (*cudaWave, []byte) {
	rng := newTestRand(t)
	cw := &cudaWave{}
	var carry *wave
	for b := range batches {
		req := &batchReq{id: int64(b)}
		for i := range e.cfg.BatchSize {
			req.samples = append(req.samples, Sample{URI: paths[(2*b+i)%len(paths)], Box: randomBox(rng, []int64{64, 64, 64}, e.cfg.SampleShape)})
		}
		waves := e.planRequest(req, e.route, carry)
		if err := waves[0].batch.failed(); err != nil {
			t.Fatal(err)
		}
		if len(waves) != 1 || (carry != nil && !waves[0].carried) {
			t.Fatalf("batch %d: %d waves (carried %v), want one joining the wave before", b, len(waves), waves[0].carried)
		}
		if carry != nil {
			carry.joinsNext = true
		}
		carry = waves[0]
		cw.parts = append(cw.parts, &wavePart{wave: carry})
	}
	slab := bytes.Repeat([]byte{0xa5}, int(e.lim.slab))
	for _, p := range cw.parts {
		if err := e.read(context.Background(), p.wave, p.reads, slab); err != nil {
			t.Fatal(err)
		}
	}
	return cw, slab
}

// wantDecoded is job j's decoded bytes as the CUDA engine stages them
// (stored: its stored bytes): a blosc chunk routed to the CPU still
// shuffled (check set its bloscPayload), any other decoded whole.
func wantDecoded(t *testing.T, j *job, stored []byte) []byte {
	out := make([]byte, j.layout.Bytes())
	if j.bloscPayload != nil {
		if _, err := blosc.DecodeNoUnshuffle(out, j.bloscPayload); err != nil {
			t.Fatal(err)
		}
		return out
	}
	d, err := zarr.NewDecoder(zarr.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Decode(out, &j.chunk, stored); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSplit checks the CPU decodes routePart lists for part p: each
// writes to its chunk's place (the slab after the part's reads, or its
// spill buffer when nvCOMP refused it), and a blosc chunk of several
// blocks (all are above tinySplit's size) is split into ranges of blocks
// that cover it once, in order, any other decoded whole by one task.
func checkSplit(t *testing.T, p *wavePart, pp partPrep, ds []cpuDecode, slab []byte) (split int) {
	for _, d := range ds[pp.first:pp.end] {
		j, n := d.j, d.j.layout.Bytes()
		var at []byte
		if j.gpu {
			if !slices.Contains(pp.spill, j) {
				t.Fatalf("%s: an nvCOMP chunk decoded on the CPU is not in its part's spill list", j.chunk.Key)
			}
			at = pp.spillBuf[j.decOff-p.arenaAt:]
		} else {
			if !j.decInSlab || j.decOff < p.slabAt || j.decOff+int64(n) > p.slabEnd {
				t.Fatalf("%s: decoded at %d, outside the part's slab [%d, %d)", j.chunk.Key, j.decOff, p.slabAt, p.slabEnd)
			}
			at = slab[j.decOff:]
		}
		if len(d.dst) != n || cap(d.dst) != n || &d.dst[0] != &at[0] {
			t.Fatalf("%s: decodes into %d bytes (cap %d) elsewhere than its place", j.chunk.Key, len(d.dst), cap(d.dst))
		}
		ts := d.tasks(7, nil)
		var blocks int
		if j.bloscPayload != nil {
			h, err := blosc.ParseHeader(j.bloscPayload)
			if err != nil {
				t.Fatal(err)
			}
			blocks = h.Blocks()
		}
		if blocks < 2 {
			if len(ts) != 1 || ts[0] != (decodeTask{chunk: 7, from: -1}) {
				t.Fatalf("%s: tasks %v, want the whole chunk", j.chunk.Key, ts)
			}
			continue
		}
		if d.payload == nil || len(ts) < 2 {
			t.Fatalf("%s: a blosc chunk of %d bytes is not split (%d tasks)", j.chunk.Key, n, len(ts))
		}
		next := 0
		for _, tk := range ts {
			if tk.chunk != 7 || tk.from != next || tk.to <= tk.from || tk.to-tk.from > d.step {
				t.Fatalf("%s: tasks %v do not cover its %d blocks in steps of %d", j.chunk.Key, ts, d.nblocks, d.step)
			}
			next = tk.to
		}
		if next != d.nblocks {
			t.Fatalf("%s: tasks %v end at block %d of %d", j.chunk.Key, ts, next, d.nblocks)
		}
		split++
	}
	return split
}

// checkPrepared checks what prepareParts left for the live parts of cw:
// every chunk's decoded bytes where wl says, bit for bit what the CPU
// decoders give (raw chunks in place, in the slab or the spill copies;
// chunks nvCOMP takes as its entries, nowhere yet).
func checkPrepared(t *testing.T, cw *cudaWave, slab []byte, wl *waveLayout, arenaAt int64) {
	gpu := map[*job]bool{}
	for _, ents := range wl.ents {
		for _, en := range ents {
			gpu[en.job] = true
		}
	}
	spill := map[int64][]byte{}
	for _, c := range cw.spill {
		spill[c.dst] = c.src
	}
	for _, p := range cw.live() {
		stored := p.stored(slab)
		bp := p.batch.plan
		for _, ji := range p.jobs {
			j := bp.jobs[ji]
			n := int64(j.layout.Bytes())
			if gpu[j] {
				if _, ok := wl.where[j]; ok {
					t.Fatalf("%s: an nvCOMP chunk has a place before layout", j.chunk.Key)
				}
				continue
			}
			where, ok := wl.where[j]
			if !ok {
				t.Fatalf("%s: no place for its decoded bytes", j.chunk.Key)
			}
			var got []byte
			switch {
			case j.gpu:
				if got = spill[where]; where != arenaAt+j.decOff || int64(len(got)) != n {
					t.Fatalf("%s: spilled to %d (%d bytes), want %d", j.chunk.Key, where, len(got), arenaAt+j.decOff)
				}
			case j.chunk.Codec.Route().Compression == zarr.CompressionNone:
				if where != j.slabOff || where%int64(j.src.dtype.Size()) != 0 {
					t.Fatalf("%s: raw chunk at %d, not in place at %d", j.chunk.Key, where, j.slabOff)
				}
				got = slab[where : where+n]
			default:
				if where != j.decOff {
					t.Fatalf("%s: decoded at %d, planned at %d", j.chunk.Key, where, j.decOff)
				}
				got = slab[where : where+n]
			}
			if want := wantDecoded(t, j, stored(j)); !bytes.Equal(got, want) {
				t.Fatalf("%s (%s): staged bytes differ from the decoder's: %s", j.chunk.Key, j.src.uri, firstDiff(got, want, 1))
			}
		}
	}
}

// TestPrepareSplitsChunks prepares a wave of three batches, with and
// without nvCOMP's routing: the CPU chunks of every part are listed
// together, each blosc chunk split into ranges of blocks (routePart), and
// once decoded in one Run (prepareParts) every chunk's bytes are where
// the wave's layout says, bit for bit the whole-chunk decoders' output.
// Raw chunks stored without a checksum are planned with no room for a
// copy and read in place.
func TestPrepareSplitsChunks(t *testing.T) {
	seed := zarrtest.Seed(t)
	paths := prepareArrays(t, seed)
	for _, nv := range []bool{false, true} {
		t.Run(fmt.Sprintf("nvcomp=%v", nv), func(t *testing.T) {
			e := prepareEngine(t, nv)
			cw, slab := prepareWave(t, e, paths, 3)
			ctx := context.Background()
			var ds []cpuDecode
			split, raw := 0, 0
			for _, p := range cw.parts {
				pp, err := e.routePart(ctx, p, slab, &waveLayout{where: map[*job]int64{}}, &ds)
				if err != nil {
					t.Fatal(err)
				}
				if pp.first != len(ds)-(pp.end-pp.first) || pp.end != len(ds) {
					t.Fatalf("part's decodes at [%d, %d) of %d", pp.first, pp.end, len(ds))
				}
				split += checkSplit(t, p, pp, ds, slab)
				for _, ji := range p.jobs {
					if j := p.batch.plan.jobs[ji]; j.rawInPlace {
						raw++
						if j.slabCost != j.chunk.Length || j.decInSlab {
							t.Fatalf("%s: raw chunk planned with %d staging bytes (decInSlab %v)", j.chunk.Key, j.slabCost, j.decInSlab)
						}
					}
				}
			}
			if split == 0 || raw == 0 {
				t.Fatalf("%d chunks split, %d raw ones read in place: the wave lacks the cases", split, raw)
			}
			wl := &waveLayout{where: map[*job]int64{}}
			e.prepareParts(ctx, cw, slab, wl)
			if len(cw.live()) != len(cw.parts) {
				for _, p := range cw.parts {
					if p.err != nil {
						t.Fatal(p.err)
					}
				}
			}
			if nv && (len(cw.spill) == 0 || len(wl.ents[plan.Zstd])+len(wl.ents[plan.LZ4]) == 0 || len(wl.ents[plan.BloscLZ]) == 0) {
				t.Fatalf("%d spilled chunks, %d zstd, %d lz4 and %d blosclz entries: the GPU's routing is not exercised", len(cw.spill), len(wl.ents[plan.Zstd]), len(wl.ents[plan.LZ4]), len(wl.ents[plan.BloscLZ]))
			}
			checkPrepared(t, cw, slab, wl, e.bufs[0].arena)
			t.Logf("%d parts, %d CPU decodes (%d split), %d raw chunks in place, %d spilled", len(cw.parts), len(ds), split, raw, len(cw.spill))
		})
	}
}

// TestPrepareSplitPartErrors damages the last block of a split blosc
// chunk of the middle part of a wave: that part alone fails, with
// ErrDecode naming the chunk, and the other parts' chunks are decoded and
// laid out as if it were not there.
func TestPrepareSplitPartErrors(t *testing.T) {
	seed := zarrtest.Seed(t)
	paths := prepareArrays(t, seed)
	e := prepareEngine(t, false)
	cw, slab := prepareWave(t, e, paths, 3)
	bad := cw.parts[1]
	var key string
	for _, ji := range bad.jobs {
		j := bad.batch.plan.jobs[ji]
		if j.chunk.Codec.Route().Compression != zarr.CompressionBlosc {
			continue
		}
		// Its last block starting at the frame's end: that block's task
		// fails, the others decode.
		stored := j.inSlab(slab)
		h, err := blosc.ParseHeader(stored)
		if err != nil {
			t.Fatal(err)
		}
		if h.Memcpyed() || h.Blocks() < 2 {
			continue
		}
		binary.LittleEndian.PutUint32(stored[blosc.HeaderSize+4*(h.Blocks()-1):], uint32(h.Cbytes))
		key = j.src.rel(j.chunk.Key)
		break
	}
	if key == "" {
		t.Fatal("the middle part has no blosc chunk")
	}
	wl := &waveLayout{where: map[*job]int64{}}
	e.prepareParts(context.Background(), cw, slab, wl)
	var pe *Error
	if !errors.As(bad.err, &pe) || pe.Kind != ErrDecode || pe.Chunk != key {
		t.Fatalf("damaged part: %v, want ErrDecode in chunk %s", bad.err, key)
	}
	for i, p := range cw.parts {
		if p != bad && p.err != nil {
			t.Fatalf("part %d: %v", i, p.err)
		}
	}
	checkPrepared(t, cw, slab, wl, e.bufs[0].arena)
}

// TestRouteRawChunkDamaged reads a raw chunk stored in exactly its decoded
// size, planned in place with no room for a copy, whose chain has a
// checksum that leaves four bytes fewer: its part fails with ErrDecode
// (zarr.ErrCorrupt) naming the chunk, as the CPU decoder would fail it.
func TestRouteRawChunkDamaged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "crc")
	meta := `{"zarr_format": 3, "node_type": "array", "shape": [64, 64, 64], "data_type": "uint16", "fill_value": 0,
		"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64, 64]}},
		"chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
		"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}`
	if err := os.MkdirAll(filepath.Join(dir, "c", "0", "0"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64*64*64*2-4)
	for i := range data {
		data[i] = byte(i * 7)
	}
	chunk := binary.LittleEndian.AppendUint32(data, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(filepath.Join(dir, "zarr.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c", "0", "0", "0"), chunk, 0o644); err != nil {
		t.Fatal(err)
	}
	e := prepareEngine(t, false)
	cw, slab := prepareWave(t, e, []string{dir}, 1)
	p := cw.parts[0]
	if j := p.batch.plan.jobs[p.jobs[0]]; !j.rawInPlace || j.slabCost != j.chunk.Length {
		t.Fatalf("chunk planned with %d staging bytes (in place %v), want its %d", j.slabCost, j.rawInPlace, j.chunk.Length)
	}
	e.prepareParts(context.Background(), cw, slab, &waveLayout{where: map[*job]int64{}})
	var pe *Error
	if !errors.As(p.err, &pe) || pe.Kind != ErrDecode || !errors.Is(p.err, zarr.ErrCorrupt) || pe.Chunk != "c/0/0/0" {
		t.Fatalf("part: %v, want ErrDecode (corrupt) in chunk c/0/0/0", p.err)
	}
}
