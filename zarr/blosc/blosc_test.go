package blosc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// testRNG returns a generator seeded from the clock, logging the seed.
func testRNG(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 1))
}

func randomData(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// smoothData is little-endian elements of ts bytes from a random walk: high
// bytes repeat, low bytes are noisy, as in measured data.
func smoothData(rng *rand.Rand, n, ts int) []byte {
	b := make([]byte, n+ts)
	v := rng.Uint64()
	for i := 0; i < n; i += ts {
		v += uint64(rng.IntN(7)) - 3
		for k := range ts {
			b[i+k] = byte(v >> (8 * min(k, 7)))
		}
	}
	return b[:n]
}

// farData repeats a random snippet about 9 KiB apart, so that only blosclz's
// far matches (distance >= 8192) can reach the repeats.
func farData(rng *rand.Rand, n int) []byte {
	snippet := randomData(rng, 300)
	var b []byte
	for len(b) < n {
		b = append(b, snippet...)
		for i := range 9000 {
			b = append(b, byte(i/37%251))
		}
	}
	return b[:n]
}

var compressors = []Compressor{BloscLZ, LZ4, LZ4HC, Snappy, Zlib, Zstd}

// TestRoundTrip encodes and decodes every compressor x shuffle x typesize
// on sizes that leave partial last blocks, sizes under 128 bytes, random
// and smooth data.
func TestRoundTrip(t *testing.T) {
	rng := testRNG(t)
	dec, err := NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	type size struct{ nelem, blocksize int }
	// Every typesize gets the small sizes; the large ones (automatic
	// blocksizes, several blocks) go to one random typesize each, which
	// keeps the test quick under -race.
	small := []size{{0, 0}, {1, 0}, {5, 0}, {31, 0}, {100, 0}, {129, 0}, {1000, 256}, {1237, 512}, {4099, 2048}}
	large := []size{{20000, 0}, {70001, 0}}
	typesizes := []int{1, 2, 4, 8, 16, 3}
	for _, c := range compressors {
		for _, s := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			bigTS := typesizes[rng.IntN(len(typesizes))]
			for _, ts := range typesizes {
				sizes := small
				if ts == bigTS {
					sizes = append(sizes[:len(sizes):len(sizes)], large...)
				}
				for _, size := range sizes {
					for _, kind := range []string{"random", "smooth"} {
						n := size.nelem * ts
						raw := randomData(rng, n)
						if kind == "smooth" {
							raw = smoothData(rng, n, ts)
						}
						// Levels 8 and 9 map to zstd's slowest encoders:
						// TestEncodeLayout and the Python checks cover them.
						o := Options{Compressor: c, Level: 1 + rng.IntN(7), Shuffle: s, Typesize: ts, Blocksize: size.blocksize}
						frame, err := Encode(raw, o)
						if err != nil {
							t.Fatalf("Encode(%d %s bytes, %+v): %v", n, kind, o, err)
						}
						dst := make([]byte, n)
						got, err := dec.Decode(dst, frame)
						if err != nil || got != n || !bytes.Equal(dst, raw) {
							t.Fatalf("Decode(Encode(%d %s bytes, %+v)) = %d, %v; differs at %d", n, kind, o, got, err, firstDiff(dst, raw))
						}
						h, _ := ParseHeader(frame)
						if n < minBufferSize && !h.Memcpyed() {
							t.Errorf("Encode(%d bytes, %+v) is not memcpyed", n, o)
						}
						if kind == "smooth" && n >= 4096 && s != NoShuffle && ts > 1 && h.Memcpyed() {
							t.Errorf("Encode(%d smooth bytes, %+v) did not compress", n, o)
						}
						checkDecodes(t, fmt.Sprintf("%+v n=%d %s", o, n, kind), frame, raw)
					}
				}
			}
		}
	}
}

// TestEncodeLayout checks flags, splits and block starts of encoded chunks
// against the format's rules.
func TestEncodeLayout(t *testing.T) {
	rng := testRNG(t)
	tests := []struct {
		o          Options
		n          int
		blocksize  int
		flags      uint8
		nsplitFull int // streams in a full block
	}{
		{Options{Compressor: LZ4, Level: 5, Shuffle: ByteShuffle, Typesize: 4}, 1 << 20, 512 << 10, 0x21, 4},
		{Options{Compressor: Zstd, Level: 5, Shuffle: BitShuffle, Typesize: 4}, 1 << 20, 256 << 10, 0x94, 1},
		{Options{Compressor: LZ4, Level: 5, Shuffle: ByteShuffle, Typesize: 32}, 1 << 20, 128 << 10, 0x31, 1},
		{Options{Compressor: BloscLZ, Level: 5, Typesize: 2, Blocksize: 40000}, 1 << 20, 80000, 0x00, 2},
		{Options{Compressor: Zlib, Level: 1, Shuffle: ByteShuffle, Typesize: 2, Blocksize: 100}, 10000, 128, 0x71, 1},
		{Options{Compressor: Snappy, Level: 5, Typesize: 8}, 1 << 20, 1 << 20, 0x40, 8},
	}
	for _, tt := range tests {
		raw := smoothData(rng, tt.n, tt.o.Typesize)
		frame, err := Encode(raw, tt.o)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse(frame)
		if err != nil {
			t.Fatalf("Parse(Encode(%+v)): %v", tt.o, err)
		}
		h := f.Header
		if h.Blocksize != tt.blocksize || h.Flags != tt.flags {
			t.Errorf("Encode(%d bytes, %+v): blocksize %d, flags %#02x; want %d, %#02x", tt.n, tt.o, h.Blocksize, h.Flags, tt.blocksize, tt.flags)
		}
		if n := h.nsplits(h.Blocksize); n != tt.nsplitFull {
			t.Errorf("Encode(%+v): %d streams per block, want %d", tt.o, n, tt.nsplitFull)
		}
		if h.Cbytes != len(frame) {
			t.Errorf("Encode(%+v): cbytes %d, chunk %d bytes", tt.o, h.Cbytes, len(frame))
		}
	}
}

// TestEncodeIncompressible checks the memcpyed fallback.
func TestEncodeIncompressible(t *testing.T) {
	rng := testRNG(t)
	raw := randomData(rng, 100000)
	for _, c := range compressors {
		frame, err := Encode(raw, Options{Compressor: c, Level: 9, Shuffle: ByteShuffle, Typesize: 4})
		if err != nil {
			t.Fatal(err)
		}
		h, err := ParseHeader(frame)
		if err != nil || !h.Memcpyed() || len(frame) != len(raw)+HeaderSize || !bytes.Equal(frame[HeaderSize:], raw) {
			t.Errorf("%s on random data: header %+v, err %v, %d bytes; want a memcpyed chunk", c, h, err, len(frame))
		}
	}
}

func TestEncodeOptionsErrors(t *testing.T) {
	for _, o := range []Options{
		{Compressor: 9, Level: 1},
		{Compressor: LZ4, Level: 10},
		{Compressor: LZ4, Level: -1},
		{Compressor: LZ4, Level: 1, Shuffle: 3},
		{Compressor: LZ4, Level: 1, Typesize: 256},
		{Compressor: LZ4, Level: 1, Typesize: -1},
		{Compressor: LZ4, Level: 1, Blocksize: -5},
	} {
		if b, err := Encode([]byte("data"), o); err == nil {
			t.Errorf("Encode(%+v) = %d bytes, nil; want an error", o, len(b))
		}
	}
}

// TestEncoderReuse encodes many inputs with one Encoder and appends.
func TestEncoderReuse(t *testing.T) {
	rng := testRNG(t)
	for _, c := range compressors {
		e, err := NewEncoder(Options{Compressor: c, Level: 4, Shuffle: BitShuffle, Typesize: 2})
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		for range 5 {
			raw := smoothData(rng, 2*(100+rng.IntN(50000)), 2)
			out, err := e.Encode(prefix, raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out[:len(prefix)], prefix) {
				t.Fatalf("%s: Encode clobbered the prefix", c)
			}
			dst := make([]byte, len(raw))
			if _, err := Decode(dst, out[len(prefix):]); err != nil || !bytes.Equal(dst, raw) {
				t.Fatalf("%s: reused Encoder: %v", c, err)
			}
		}
		e.Close()
	}
}

// header builds a 16-byte header.
func header(version, versionlz, flags, typesize byte, nbytes, blocksize, cbytes uint32) []byte {
	b := []byte{version, versionlz, flags, typesize}
	b = binary.LittleEndian.AppendUint32(b, nbytes)
	b = binary.LittleEndian.AppendUint32(b, blocksize)
	return binary.LittleEndian.AppendUint32(b, cbytes)
}

var headerTests = []struct {
	name  string
	in    []byte
	field string
	kind  error
}{
	{"short", []byte{2, 1, 0}, "header", ErrCorrupt},
	{"version 1", header(1, 1, 0x02, 1, 0, 1, 16), "version", ErrUnsupported},
	{"version 3 (blosc2)", header(3, 1, 0x02, 1, 0, 1, 16), "version", ErrUnsupported},
	{"reserved flag", header(2, 1, 0x0a, 1, 0, 1, 16), "flags", ErrCorrupt},
	{"typesize 0", header(2, 1, 0x02, 0, 0, 1, 16), "typesize", ErrCorrupt},
	{"nbytes too large", header(2, 1, 0x02, 1, 1<<31, 1, 16), "nbytes", ErrCorrupt},
	{"nbytes 2^32-1", header(2, 1, 0x02, 1, 1<<32-1, 1, 16), "nbytes", ErrCorrupt},
	{"blocksize 0", header(2, 1, 0x02, 1, 10, 0, 26), "blocksize", ErrCorrupt},
	{"blocksize too large", header(2, 1, 0x00, 1, 1<<30, MaxBlocksize+1, 16), "blocksize", ErrCorrupt},
	{"blocksize > nbytes", append(header(2, 1, 0x02, 1, 10, 11, 26), make([]byte, 10)...), "blocksize", ErrCorrupt},
	{"cbytes < 16", header(2, 1, 0x02, 1, 0, 1, 15), "cbytes", ErrCorrupt},
	{"cbytes > len", header(2, 1, 0x02, 1, 0, 1, 17), "cbytes", ErrCorrupt},
	{"cbytes 2^32-1", header(2, 1, 0x02, 1, 0, 1, 1<<32-1), "cbytes", ErrCorrupt},
	{"memcpyed cbytes != nbytes+16", append(header(2, 1, 0x02, 1, 4, 4, 19), 1, 2, 3), "cbytes", ErrCorrupt},
	{"codec 5", append(header(2, 1, 0xa0, 1, 4, 4, 28), make([]byte, 12)...), "flags", ErrUnsupported},
	{"codec 7", append(header(2, 1, 0xe0, 1, 4, 4, 28), make([]byte, 12)...), "flags", ErrUnsupported},
	{"versionlz 2", append(header(2, 2, 0x20, 1, 4, 4, 28), make([]byte, 12)...), "versionlz", ErrUnsupported},
	{"too many blocks", append(header(2, 1, 0x20, 1, 1000, 1, 40), make([]byte, 24)...), "cbytes", ErrCorrupt},
}

func TestParseHeaderErrors(t *testing.T) {
	for _, tt := range headerTests {
		h, err := ParseHeader(tt.in)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, tt.kind) || h != (Header{}) {
			t.Errorf("%s: ParseHeader = %+v, %v; want a %v in field %q", tt.name, h, err, tt.kind, tt.field)
		}
		if _, err := Decode(make([]byte, 1<<12), tt.in); !errors.Is(err, tt.kind) {
			t.Errorf("%s: Decode error %v, want %v", tt.name, err, tt.kind)
		}
		if f, err := Parse(tt.in); f != nil || !errors.Is(err, tt.kind) {
			t.Errorf("%s: Parse = %v, %v; want nil, %v", tt.name, f, err, tt.kind)
		}
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want Header
		c    Compressor
		s    Shuffle
	}{
		{"empty", header(2, 1, 0x33, 8, 0, 1, 16), Header{2, 1, 0x33, 8, 0, 1, 16}, LZ4, NoShuffle},
		// c-blosc ignores codec and codec version of memcpyed chunks.
		{"memcpyed codec 7", append(header(2, 9, 0xe2, 1, 2, 2, 18), 1, 2), Header{2, 9, 0xe2, 1, 2, 2, 18}, Compressor(255), NoShuffle},
		{"trailing bytes", append(header(2, 1, 0x92, 1, 2, 2, 18), 1, 2, 3), Header{2, 1, 0x92, 1, 2, 2, 18}, Zstd, NoShuffle},
		{"bitshuffle", append(header(2, 1, 0x94, 2, 2, 2, 30), make([]byte, 14)...), Header{2, 1, 0x94, 2, 2, 2, 30}, Zstd, BitShuffle},
		{"byte shuffle typesize 1 is none", append(header(2, 1, 0x01, 1, 2, 2, 30), make([]byte, 14)...), Header{2, 1, 0x01, 1, 2, 2, 30}, BloscLZ, NoShuffle},
		{"both shuffles: byte wins", append(header(2, 1, 0x45, 4, 4, 4, 30), make([]byte, 14)...), Header{2, 1, 0x45, 4, 4, 4, 30}, Snappy, ByteShuffle},
	}
	for _, tt := range tests {
		h, err := ParseHeader(tt.in)
		if err != nil || h != tt.want || h.Compressor() != tt.c || h.Shuffle() != tt.s {
			t.Errorf("%s: ParseHeader = %+v (%s, %s), %v; want %+v (%s, %s)", tt.name, h, h.Compressor(), h.Shuffle(), err, tt.want, tt.c, tt.s)
		}
	}
}

// TestDecodeEmptyAndMemcpyed covers the chunks that have no blocks.
func TestDecodeEmptyAndMemcpyed(t *testing.T) {
	n, err := Decode(nil, header(2, 1, 0x33, 8, 0, 1, 16))
	if n != 0 || err != nil {
		t.Errorf("Decode(empty chunk) = %d, %v; want 0, nil", n, err)
	}
	chunk := append(header(2, 7, 0xe3, 2, 4, 3, 20), 1, 2, 3, 4)
	dst := make([]byte, 4)
	if n, err := Decode(dst, chunk); n != 4 || err != nil || !bytes.Equal(dst, []byte{1, 2, 3, 4}) {
		t.Errorf("Decode(memcpyed) = %d, %v, %v; want 4, nil, [1 2 3 4] (never unshuffled)", n, err, dst)
	}
}

func TestDecodeShortDst(t *testing.T) {
	frame, err := Encode(make([]byte, 1000), Options{Compressor: LZ4, Level: 5})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Decode(make([]byte, 999), frame)
	if n != 0 || !errors.Is(err, io.ErrShortBuffer) {
		t.Errorf("Decode into 999 bytes = %d, %v; want 0, io.ErrShortBuffer", n, err)
	}
}

// TestBlockOrder moves blocks around inside chunks, as multithreaded c-blosc
// writes them, and checks that they still decode.
func TestBlockOrder(t *testing.T) {
	rng := testRNG(t)
	for _, c := range compressors {
		raw := smoothData(rng, 75000*4+12, 4)
		frame, err := Encode(raw, Options{Compressor: c, Level: 5, Shuffle: ByteShuffle, Typesize: 4, Blocksize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		h, _ := ParseHeader(frame)
		nb := h.nblocks()
		if h.Memcpyed() || nb < 5 {
			t.Fatalf("%s: want a compressed chunk of several blocks, got %+v", c, h)
		}
		// Reverse the blocks' bytes and rewrite the starts.
		starts := make([]int, nb+1)
		for j := range nb {
			starts[j] = int(binary.LittleEndian.Uint32(frame[HeaderSize+4*j:]))
		}
		starts[nb] = h.Cbytes
		out := append([]byte(nil), frame[:HeaderSize+4*nb]...)
		for j := nb - 1; j >= 0; j-- {
			binary.LittleEndian.PutUint32(out[HeaderSize+4*j:], uint32(len(out)))
			out = append(out, frame[starts[j]:starts[j+1]]...)
		}
		checkDecodes(t, c.String()+" reversed blocks", out, raw)
	}
}

// TestCorruptChunks damages valid chunks: every truncation, and random
// byte changes. Decoding must fail cleanly or, when the damage is in bytes
// the format cannot check (raw streams, zstd/lz4 literals), succeed.
func TestCorruptChunks(t *testing.T) {
	rng := testRNG(t)
	for _, c := range compressors {
		for _, s := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			raw := smoothData(rng, 3000, 2)
			frame, err := Encode(raw, Options{Compressor: c, Level: 5, Shuffle: s, Typesize: 2, Blocksize: 1024})
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, len(raw))
			for cut := range len(frame) {
				if n, err := Decode(dst, frame[:cut]); err == nil {
					t.Fatalf("%s/%s: Decode(chunk[:%d] of %d) = %d, nil", c, s, cut, len(frame), n)
				}
			}
			for range 300 {
				bad := bytes.Clone(frame)
				for range 1 + rng.IntN(3) {
					bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
				}
				n, err := Decode(dst, bad)
				if err != nil {
					var fe *FormatError
					if errors.Is(err, io.ErrShortBuffer) {
						continue // nbytes damaged upwards
					}
					if !errors.As(err, &fe) || !(errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported)) {
						t.Fatalf("%s/%s: Decode(damaged) error %v is not a FormatError", c, s, err)
					}
					continue
				}
				h, _ := ParseHeader(bad)
				if n != h.Nbytes {
					t.Fatalf("%s/%s: Decode(damaged) = %d, nil; header says %d", c, s, n, h.Nbytes)
				}
			}
		}
	}
}

// TestStreamErrors checks each stream check on hand-made chunks.
func TestStreamErrors(t *testing.T) {
	// One block of 4 bytes, typesize 1, one stream of csize 4: raw.
	base := func(flags byte, stream []byte) []byte {
		b := header(2, 1, flags, 1, 4, 4, uint32(HeaderSize+4+4+len(stream)))
		b = binary.LittleEndian.AppendUint32(b, HeaderSize+4)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(stream)))
		return append(b, stream...)
	}
	ok := base(0x00, []byte{1, 2, 3, 4})
	if _, err := Decode(make([]byte, 4), ok); err != nil {
		t.Fatalf("raw stream: %v", err)
	}
	tests := []struct {
		name  string
		in    []byte
		field string
	}{
		{"block start in table", func() []byte { b := bytes.Clone(ok); b[16] = 16; return b }(), "bstarts[0]"},
		{"block start past end", func() []byte { b := bytes.Clone(ok); b[16] = 99; return b }(), "bstarts[0]"},
		{"stream length 0", func() []byte { b := bytes.Clone(ok); b[20] = 0; return b }(), "block 0 stream 0"},
		{"stream length negative", func() []byte { b := bytes.Clone(ok); b[23] = 0x80; return b }(), "block 0 stream 0"},
		{"stream length past end", func() []byte { b := bytes.Clone(ok); b[20] = 5; return b }(), "block 0 stream 0"},
		{"lz4 short output", base(0x20, []byte{0x20, 1, 2}), "block 0 stream 0"},
		{"blosclz long output", base(0x00, []byte{4, 1, 2, 3, 4, 5}), "block 0 stream 0"},
		{"blosclz bad distance", base(0x00, []byte{0, 1, 0x20, 5, 0}), "block 0 stream 0"},
		{"zstd garbage", base(0x80, []byte{1, 2, 3}), "block 0 stream 0"},
		{"zlib garbage", base(0x60, []byte{1, 2, 3}), "block 0 stream 0"},
		{"snappy wrong length", base(0x40, []byte{3, 8, 1, 2, 3}), "block 0 stream 0"},
	}
	for _, tt := range tests {
		_, err := Decode(make([]byte, 4), tt.in)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Decode error %v; want ErrCorrupt in %q", tt.name, err, tt.field)
		}
	}
}

// TestZlibStreamEnds checks that a zlib stream must end exactly at the
// stream's length, checksum included.
func TestZlibStreamEnds(t *testing.T) {
	rng := testRNG(t)
	raw := smoothData(rng, 4000, 1)
	frame, err := Encode(raw, Options{Compressor: Zlib, Level: 5, Blocksize: 4000})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(frame)
	if err != nil || len(f.Streams) != 1 || f.Streams[0].Raw {
		t.Fatalf("want one zlib stream, got %+v, %v", f, err)
	}
	s := f.Streams[0]
	bad := bytes.Clone(frame)
	bad[s.Src+s.CSize-1] ^= 1 // adler32
	if _, err := Decode(make([]byte, len(raw)), bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad adler32: %v, want ErrCorrupt", err)
	}
	// Claim the block is one byte shorter: the stream then decodes long.
	short := bytes.Clone(frame)
	binary.LittleEndian.PutUint32(short[4:], uint32(len(raw)-1))
	binary.LittleEndian.PutUint32(short[8:], uint32(len(raw)-1))
	if _, err := Decode(make([]byte, len(raw)), short); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zlib stream longer than its block: %v, want ErrCorrupt", err)
	}
}

// TestDecodeNoAlloc checks that a warm Decoder allocates nothing (zlib's
// inflater excepted: it allocates Huffman tables per deflate block).
func TestDecodeNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: allocation counts are meaningless")
	}
	rng := testRNG(t)
	raw := smoothData(rng, 256<<10, 4)
	for _, c := range []Compressor{BloscLZ, LZ4, LZ4HC, Snappy, Zstd} {
		for _, s := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			frame, err := Encode(raw, Options{Compressor: c, Level: 5, Shuffle: s, Typesize: 4})
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, len(raw))
			d, _ := shared()
			// Warm every internal zstd decoder first (there is one per
			// GOMAXPROCS, used in turn): only the steady state must not
			// allocate.
			for range 4 * runtime.GOMAXPROCS(0) {
				if _, err := d.Decode(dst, frame); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(20, func() {
				if _, err := d.Decode(dst, frame); err != nil {
					t.Fatal(err)
				}
			})
			if allocs > 0 {
				t.Errorf("%s/%s: Decode allocates %.1f times per call", c, s, allocs)
			}
		}
	}
}
