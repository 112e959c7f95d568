package ptx

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

func newRand(t testing.TB) *rand.Rand {
	seed := zarrtest.Seed(t)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// randomShape returns a sample shape of the given rank with at most a few
// thousand elements.
func randomShape(rng *rand.Rand, rank int) []int {
	limit := []int{0, 3000, 50, 14, 7, 5, 4, 3, 3}[rank]
	s := make([]int, rank)
	for d := range s {
		s[d] = 1 + rng.IntN(limit)
	}
	return s
}

func poisoned(n int64) []byte {
	return bytes.Repeat([]byte{poison}, int(n))
}

// TestAssembleHost runs every source dtype x byte order x shuffle mode, into
// both output types at every rank, through AssembleHost, and compares each
// output element with the value computed from the chunks' logical values.
func TestAssembleHost(t *testing.T) {
	eachScenario(t, func(t *testing.T, rng *rand.Rand, sc *scenario) {
		got := poisoned(sc.layout.Bytes())
		workers := []int{0, 1, 3}[rng.IntN(3)]
		if err := AssembleHost(got, sc.layout, sc.arena, sc.plan.Ops(), nil, workers); err != nil {
			t.Fatal(err)
		}
		if d := firstDiff(sc, got); d != "" {
			t.Errorf("shape %v, %d ops: %s", sc.layout.Shape, len(sc.plan.Ops()), d)
		}
	})
}

// eachScenario runs f, in a subtest, on a random scenario of every source
// dtype x byte order x shuffle mode for each output type and rank.
func eachScenario(t *testing.T, f func(t *testing.T, rng *rand.Rand, sc *scenario)) {
	rng := newRand(t)
	for _, out := range []Dtype{Float32, BFloat16} {
		for rank := 1; rank <= MaxRank; rank++ {
			t.Run(fmt.Sprintf("%v/rank%d", out, rank), func(t *testing.T) {
				sc, err := newScenario(rng, out, randomShape(rng, rank), allSpecs())
				if err != nil {
					t.Fatal(err)
				}
				f(t, rng, sc)
			})
		}
	}
}

// bloscCase is one case of testdata/blosc_shuffle.json: a chunk as c-blosc
// shuffled it (written by testdata/blosc_shuffle.py through numcodecs).
type bloscCase struct {
	Name      string
	Dtype     string // NumPy typestr, such as "<u2"
	TypeSize  int
	BlockSize int
	Shuffle   string // "byte" or "bit"
	Data      []byte
	Shuffled  []byte
}

type bloscFixture struct {
	Blosc string
	Cases []bloscCase
}

func readBloscFixture(t *testing.T, path string) bloscFixture {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f bloscFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return f
}

var numpyDtypes = map[string]Dtype{
	"|b1": Bool, "|i1": Int8, "|u1": Uint8,
	"i2": Int16, "i4": Int32, "i8": Int64, "u2": Uint16, "u4": Uint32, "u8": Uint64,
	"f2": Float16, "f4": Float32, "f8": Float64,
}

// source returns the case as a one-dimensional copy source at offset 0,
// and the float32 bits its elements must become.
func (c *bloscCase) source(t *testing.T) (Source, []uint32) {
	t.Helper()
	d, ok := numpyDtypes[c.Dtype]
	if !ok {
		d, ok = numpyDtypes[c.Dtype[1:]]
	}
	if !ok {
		t.Fatalf("%s: dtype %q", c.Name, c.Dtype)
	}
	bigEndian := c.Dtype[0] == '>'
	mode := map[string]Shuffle{"byte": ByteShuffle, "bit": BitShuffle}[c.Shuffle]
	n := len(c.Data) / d.Size()
	want := make([]uint32, n)
	for i := range want {
		var v uint64
		for j := range d.Size() {
			b := c.Data[i*d.Size()+j]
			if bigEndian {
				v = v<<8 | uint64(b)
			} else {
				v |= uint64(b) << (8 * j)
			}
		}
		want[i] = Float32Bits(d, v)
	}
	return Source{Dtype: d, BigEndian: bigEndian, Shape: []int{n}, Shuffle: mode, TypeSize: c.TypeSize, BlockSize: c.BlockSize}, want
}

// TestBloscFixture holds this package's shuffle layouts to c-blosc's: the
// test's forward shuffle must produce c-blosc's bytes, and an op reading
// c-blosc's shuffled bytes must yield the original elements, whole and
// from an offset (so that elements straddle blocks in the op's rows).
func TestBloscFixture(t *testing.T) {
	f := readBloscFixture(t, filepath.Join("testdata", "blosc_shuffle.json"))
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			src, want := c.source(t)
			if got := shuffleBlosc(c.Data, c.TypeSize, c.BlockSize, src.Shuffle); !bytes.Equal(got, c.Shuffled) {
				t.Errorf("shuffleBlosc differs from c-blosc")
			}
			n := len(want)
			for _, start := range []int{0, 1, n / 3} {
				l := Layout{Samples: 1, Shape: []int{n - start}, Dtype: Float32}
				p, err := NewPlan(l)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Copy(0, []int{0}, []int{n - start}, &src, []int{start}); err != nil {
					t.Fatal(err)
				}
				got := poisoned(l.Bytes())
				if err := AssembleHost(got, l, c.Shuffled, p.Ops(), nil, 0); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, u32Bytes(want[start:])) {
					t.Errorf("from element %d: unshuffled elements differ", start)
				}
			}
		})
	}
}

// TestBloscFixtureCurrent regenerates the fixture with numcodecs and checks
// that the committed one is what c-blosc writes.
func TestBloscFixtureCurrent(t *testing.T) {
	python := mustHavePython(t)
	dir := t.TempDir()
	cmd := exec.Command(python, filepath.Join("testdata", "blosc_shuffle.py"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	fresh := readBloscFixture(t, filepath.Join(dir, "blosc_shuffle.json"))
	committed := readBloscFixture(t, filepath.Join("testdata", "blosc_shuffle.json"))
	if !reflect.DeepEqual(fresh.Cases, committed.Cases) {
		t.Errorf("testdata/blosc_shuffle.json differs from what numcodecs (c-blosc %s) writes now; rerun testdata/blosc_shuffle.py testdata", fresh.Blosc)
	}
}

// mustHavePython returns $DAMACY_PYTHON if it runs and has numcodecs, and
// skips the test otherwise, or fails it when DAMACY_REQUIRE_PYTHON=1.
func mustHavePython(t *testing.T) string {
	t.Helper()
	return zarrtest.MustHavePython(t, "numcodecs", "numpy")
}

// TestPlanSplit checks that ops larger than the split limit become several
// ops whose result is the same, and that the block table covers each op's
// elements exactly.
func TestPlanSplit(t *testing.T) {
	rng := newRand(t)
	for rank := 1; rank <= 4; rank++ {
		sc, err := newScenario(rng, Float32, randomShape(rng, rank), allSpecs()[:12])
		if err != nil {
			t.Fatal(err)
		}
		split, err := NewPlan(sc.layout)
		if err != nil {
			t.Fatal(err)
		}
		largest := int64(0)
		for _, op := range sc.plan.Ops() {
			largest = max(largest, opElems(&op, rank))
		}
		if largest < 2 {
			t.Fatalf("rank %d: no op to split", rank)
		}
		split.maxOpElems = 1 + rng.Int64N(min(40, largest-1))
		for _, op := range sc.plan.Ops() {
			split.add(op)
		}
		checkBlockTable(t, split)
		checkBlockTable(t, sc.plan)
		if len(split.Ops()) <= len(sc.plan.Ops()) {
			t.Errorf("rank %d: split into %d ops from %d", rank, len(split.Ops()), len(sc.plan.Ops()))
		}
		for _, op := range split.Ops() {
			if n := opElems(&op, rank); n > split.maxOpElems {
				t.Errorf("rank %d: op of %d elements after splitting at %d", rank, n, split.maxOpElems)
			}
		}
		got := poisoned(sc.layout.Bytes())
		if err := AssembleHost(got, sc.layout, sc.arena, split.Ops(), nil, 2); err != nil {
			t.Fatal(err)
		}
		if d := firstDiff(sc, got); d != "" {
			t.Errorf("rank %d, split: %s", rank, d)
		}
	}
}

func opElems(op *Op, rank int) int64 {
	n := int64(1)
	for d := range rank {
		n *= int64(op.Extent[d])
	}
	return n
}

func checkBlockTable(t *testing.T, p *Plan) {
	t.Helper()
	next := 0
	for i, op := range p.Ops() {
		blocks := int((opElems(&op, len(p.layout.Shape)) + ElemsPerBlock - 1) / ElemsPerBlock)
		if int(op.FirstBlock) != next {
			t.Fatalf("op %d: FirstBlock %d, want %d", i, op.FirstBlock, next)
		}
		for b := next; b < next+blocks; b++ {
			if p.BlockOps()[b] != uint32(i) {
				t.Fatalf("block %d maps to op %d, want %d", b, p.BlockOps()[b], i)
			}
		}
		next += blocks
	}
	if p.Blocks() != next {
		t.Fatalf("%d blocks for ops that need %d", p.Blocks(), next)
	}
}

func TestStrides(t *testing.T) {
	shape := []int{2, 3, 4}
	tests := []struct {
		name string
		got  []int
		want []int
	}{
		{"C", CStrides(shape), []int{12, 4, 1}},
		{"F", FStrides(shape), []int{1, 2, 6}},
		{"transpose identity", must(TransposeStrides(shape, []int{0, 1, 2})), []int{12, 4, 1}},
		{"transpose reversed", must(TransposeStrides(shape, []int{2, 1, 0})), []int{1, 2, 6}},
		// Stored shape (4, 2, 3): A's axis 2 outermost, then 0, then 1.
		{"transpose 2,0,1", must(TransposeStrides(shape, []int{2, 0, 1})), []int{3, 1, 6}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s strides of %v = %v; want %v", tt.name, shape, tt.got, tt.want)
		}
	}
	for _, order := range [][]int{{0, 1}, {0, 0, 1}, {0, 1, 3}, {-1, 0, 1}} {
		if _, err := TransposeStrides(shape, order); !errors.Is(err, ErrInvalid) {
			t.Errorf("TransposeStrides(%v, %v) error = %v; want ErrInvalid", shape, order, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestLayoutValidate(t *testing.T) {
	tests := []struct {
		l  Layout
		ok bool
	}{
		{Layout{1, []int{1}, Float32}, true},
		{Layout{128, []int{128, 128, 128}, BFloat16}, true},
		{Layout{1, []int{1, 1, 1, 1, 1, 1, 1, 1}, Float32}, true},
		{Layout{1, []int{1}, Uint8}, true},
		{Layout{1, []int{1}, Int64}, true},
		{Layout{1, []int{1}, Uint64}, false},
		{Layout{1, []int{1}, Float64}, false},
		{Layout{1, []int{1}, Bool}, false},
		{Layout{1, nil, Float32}, false},
		{Layout{1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, Float32}, false},
		{Layout{0, []int{4}, Float32}, false},
		{Layout{1, []int{0}, Float32}, false},
		{Layout{1, []int{-3}, Float32}, false},
		{Layout{1, []int{1 << 16, 1 << 16}, Float32}, false},
		{Layout{1, []int{1<<16 - 1, 1 << 16}, Float32}, true},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v.Validate() = %v; want ok=%v", tt.l, err, tt.ok)
		}
		if _, err := NewPlan(tt.l); (err == nil) != tt.ok {
			t.Errorf("NewPlan(%+v) = %v; want ok=%v", tt.l, err, tt.ok)
		}
	}
}

// TestPlanErrors checks that Plan refuses what the kernel cannot execute,
// names the field and leaves the plan unchanged.
func TestPlanErrors(t *testing.T) {
	l := Layout{Samples: 2, Shape: []int{4, 6}, Dtype: Float32}
	good := Source{Offset: 16, Dtype: Uint16, Shape: []int{5, 5}}
	tests := []struct {
		name     string
		sample   int
		start    []int
		extent   []int
		src      *Source // nil: a fill op
		srcStart []int
		field    string
	}{
		{"sample", 2, []int{0, 0}, []int{1, 1}, nil, nil, "Sample"},
		{"negative sample", -1, []int{0, 0}, []int{1, 1}, nil, nil, "Sample"},
		{"rank", 0, []int{0}, []int{1}, nil, nil, "Extent"},
		{"outside", 0, []int{3, 0}, []int{2, 1}, nil, nil, "Extent"},
		{"negative extent", 0, []int{0, 0}, []int{-1, 1}, nil, nil, "Extent"},
		{"dtype", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: BFloat16, Shape: []int{5, 5}}, []int{0, 0}, "Dtype"},
		{"source rank", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint8, Shape: []int{5}}, []int{0, 0}, "Shape"},
		{"outside chunk", 0, []int{0, 0}, []int{4, 4}, &good, []int{2, 0}, "Shape"},
		{"strides", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint8, Shape: []int{5, 5}, Strides: []int{5, 2}}, []int{0, 0}, "SrcStride"},
		{"negative stride", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint8, Shape: []int{5, 5}, Strides: []int{-5, 1}}, []int{0, 0}, "Strides"},
		{"misaligned", 0, []int{0, 0}, []int{1, 1}, &Source{Offset: 3, Dtype: Uint16, Shape: []int{5, 5}}, []int{0, 0}, "SrcOffset"},
		{"negative offset", 0, []int{0, 0}, []int{1, 1}, &Source{Offset: -8, Dtype: Uint8, Shape: []int{5, 5}}, []int{0, 0}, "SrcOffset"},
		{"no blocksize", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint16, Shape: []int{5, 5}, Shuffle: ByteShuffle, TypeSize: 2}, []int{0, 0}, "BlockSize"},
		{"no typesize", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint16, Shape: []int{5, 5}, Shuffle: BitShuffle, BlockSize: 8}, []int{0, 0}, "BlockSize"},
		{"huge blocksize", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint16, Shape: []int{5, 5}, Shuffle: ByteShuffle, TypeSize: 2, BlockSize: 1 << 31}, []int{0, 0}, "BlockSize"},
		{"typesize", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint16, Shape: []int{5, 5}, Shuffle: BitShuffle, TypeSize: 256, BlockSize: 8}, []int{0, 0}, "TypeSize"},
		{"shuffle", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint16, Shape: []int{5, 5}, Shuffle: 3, TypeSize: 2, BlockSize: 8}, []int{0, 0}, "Shuffle"},
		{"huge chunk", 0, []int{0, 0}, []int{1, 1}, &Source{Dtype: Uint8, Shape: []int{1 << 20, 1 << 20}}, []int{0, 0}, "SrcShape"},
	}
	for _, tt := range tests {
		p, err := NewPlan(l)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Fill(1, []int{0, 0}, []int{1, 1}, 7); err != nil {
			t.Fatal(err)
		}
		if tt.src == nil {
			err = p.Fill(tt.sample, tt.start, tt.extent, 0)
		} else {
			err = p.Copy(tt.sample, tt.start, tt.extent, tt.src, tt.srcStart)
		}
		var opErr *OpError
		if !errors.As(err, &opErr) || opErr.Field != tt.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v; want an *OpError on %s", tt.name, err, tt.field)
		}
		if len(p.Ops()) != 1 || p.Blocks() != 1 || p.SourceEnd() != 0 {
			t.Errorf("%s: plan changed by a failed add: %d ops, %d blocks", tt.name, len(p.Ops()), p.Blocks())
		}
	}
	// A zero extent adds nothing and is no error.
	p, _ := NewPlan(l)
	if err := p.Copy(0, []int{0, 0}, []int{0, 3}, &good, []int{0, 0}); err != nil || len(p.Ops()) != 0 {
		t.Errorf("zero-extent copy: %v, %d ops", err, len(p.Ops()))
	}
}

// TestAssembleHostErrors corrupts valid ops field by field: AssembleHost
// must refuse each with an *OpError naming the op and field, and write
// nothing.
func TestAssembleHostErrors(t *testing.T) {
	l := Layout{Samples: 2, Shape: []int{4, 6}, Dtype: BFloat16}
	p, err := NewPlan(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Fill(0, []int{0, 0}, []int{4, 6}, 0x3f800000); err != nil {
		t.Fatal(err)
	}
	src := Source{Offset: 8, Dtype: Float32, Shape: []int{4, 7}, Shuffle: ByteShuffle, TypeSize: 4, BlockSize: 64}
	if err := p.Copy(1, []int{0, 0}, []int{4, 6}, &src, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	arena := make([]byte, 8+4*28)
	tests := []struct {
		field string
		op    int
		edit  func(*Op)
	}{
		{"Sample", 0, func(o *Op) { o.Sample = 2 }},
		{"Extent", 0, func(o *Op) { o.Extent[1] = 7 }},
		{"Extent", 0, func(o *Op) { o.Extent[0] = 0 }},
		{"Extent", 0, func(o *Op) { o.Extent[2] = 1 }},
		{"Extent", 0, func(o *Op) { o.DstStart[0] = 1 }},
		{"SrcDtype", 0, func(o *Op) { o.SrcOffset = 8 }},
		{"SrcDtype", 0, func(o *Op) { o.BigEndian = true }},
		{"Fill", 1, func(o *Op) { o.Fill = 1 }},
		{"SrcDtype", 1, func(o *Op) { o.SrcDtype = BFloat16 }},
		{"SrcOffset", 1, func(o *Op) { o.SrcOffset = 12 }},
		{"SrcOffset", 1, func(o *Op) { o.SrcOffset = 6 }},
		{"SrcShape", 1, func(o *Op) { o.SrcStart[1] = 2 }},
		{"SrcStride", 1, func(o *Op) { o.SrcStride[1] = 2 }},
		{"NBytes", 1, func(o *Op) { o.NBytes = 100 }},
		{"BlockSize", 1, func(o *Op) { o.BlockSize = 0 }},
		{"Shuffle", 1, func(o *Op) { o.Shuffle = NoShuffle }},
	}
	for _, tt := range tests {
		ops := append([]Op(nil), p.Ops()...)
		tt.edit(&ops[tt.op])
		out := poisoned(l.Bytes())
		err := AssembleHost(out, l, arena, ops, nil, 0)
		var opErr *OpError
		if !errors.As(err, &opErr) || opErr.Op != tt.op || opErr.Field != tt.field {
			t.Errorf("op %d, %s edited: error %v; want an *OpError on op %d, %s", tt.op, tt.field, err, tt.op, tt.field)
		}
		if !bytes.Equal(out, poisoned(l.Bytes())) {
			t.Errorf("op %d, %s edited: output written despite the error", tt.op, tt.field)
		}
	}
	if err := AssembleHost(make([]byte, 10), l, arena, p.Ops(), nil, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("short output: error %v; want ErrInvalid", err)
	}
	if err := AssembleHost(poisoned(l.Bytes()), l, arena, p.Ops(), nil, 0); err != nil {
		t.Errorf("unedited ops: %v", err)
	}
}

// TestFastDivision checks the multiply-high division the kernel uses for
// box extents and blosc geometry (assemble.cu's make_fastdiv and divide,
// transcribed) over its whole domain's edges and random points:
// 1 <= d <= 2^31, 0 <= n < 2^31.
func TestFastDivision(t *testing.T) {
	fastdiv := func(d uint32) (m uint32, s uint) {
		s = uint(32 - bits.LeadingZeros32(d-1))
		m = uint32((uint64(1)<<32)*((uint64(1)<<s)-uint64(d))/uint64(d) + 1)
		return m, s
	}
	divide := func(n, m uint32, s uint) uint32 {
		hi := uint32((uint64(n) * uint64(m)) >> 32)
		return (hi + n) >> s
	}
	rng := newRand(t)
	ds := []uint32{1, 2, 3, 7, 1 << 30, 1<<31 - 1, 1 << 31}
	ns := []uint32{0, 1, 2, 1<<31 - 1, 1<<31 - 2, 1 << 30}
	for range 1000 {
		ds = append(ds, 1+rng.Uint32N(1<<31), 1+rng.Uint32N(5000))
		ns = append(ns, rng.Uint32N(1<<31))
	}
	for _, d := range ds {
		m, s := fastdiv(d)
		for _, n := range append(ns, d-1, d, d+1, 2*d-1, 2*d) {
			if n >= 1<<31 {
				continue
			}
			if got := divide(n, m, s); got != n/d {
				t.Fatalf("%d / %d = %d by multiply-high; want %d", n, d, got, n/d)
			}
		}
	}
}

// BenchmarkAssembleHost measures the host twin on a batch like the
// throughput scenario's: 128^3 boxes of uint16 from 32x64x64 chunks, into
// float32, 4 samples.
func BenchmarkAssembleHost(b *testing.B) {
	for _, tt := range []struct {
		name    string
		shuffle Shuffle
	}{{"plain", NoShuffle}, {"byteshuffle", ByteShuffle}} {
		b.Run(tt.name, func(b *testing.B) {
			l, arena, plan := throughputBatch(b, 4, Float32, tt.shuffle)
			out := make([]byte, l.Bytes())
			b.SetBytes(l.Bytes())
			for b.Loop() {
				if err := AssembleHost(out, l, arena, plan.Ops(), nil, runtime.GOMAXPROCS(0)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// throughputBatch builds samples 128^3 boxes, each at a random offset in a
// grid of 32x64x64 uint16 chunks (all present, one arena region per
// chunk and sample).
func throughputBatch(tb testing.TB, samples int, out Dtype, shuffle Shuffle) (Layout, []byte, *Plan) {
	rng := rand.New(rand.NewPCG(3, 4))
	l := Layout{Samples: samples, Shape: []int{128, 128, 128}, Dtype: out}
	plan, err := NewPlan(l)
	if err != nil {
		tb.Fatal(err)
	}
	chunk := []int{32, 64, 64}
	// One chunk of random 12-bit values, stored once per use.
	data := make([]byte, 2*32*64*64)
	for i := 0; i < len(data); i += 2 {
		binary.LittleEndian.PutUint16(data[i:], uint16(rng.IntN(4096)))
	}
	var arena []byte
	for s := range samples {
		origin := []int{rng.IntN(32), rng.IntN(64), rng.IntN(64)}
		n := []int{5, 3, 3}
		for cell := range boxPoints(n) {
			start, ext, srcStart := make([]int, 3), make([]int, 3), make([]int, 3)
			empty := false
			for d := range 3 {
				c := cell[d] * chunk[d]
				lo, hi := max(c, origin[d]), min(c+chunk[d], origin[d]+128)
				start[d], ext[d], srcStart[d] = lo-origin[d], hi-lo, lo-c
				empty = empty || hi <= lo
			}
			if empty {
				continue
			}
			src := Source{Offset: int64(len(arena)), Dtype: Uint16, Shape: chunk, Shuffle: shuffle}
			if shuffle != NoShuffle {
				src.TypeSize, src.BlockSize = 2, 1<<16
			}
			arena = append(arena, data...)
			if err := plan.Copy(s, start, ext, &src, srcStart); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return l, arena, plan
}
