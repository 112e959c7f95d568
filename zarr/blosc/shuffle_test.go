package blosc

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"testing"
)

// refUnshuffle is the byte unshuffle of one block written from the format's
// definition: shuffled byte j*n+i is byte j of element i.
func refUnshuffle(src []byte, ts int) []byte {
	n := len(src) / ts
	dst := bytes.Clone(src)
	for i := range n {
		for j := range ts {
			dst[i*ts+j] = src[j*n+i]
		}
	}
	return dst
}

// refBitUnshuffle is the bit unshuffle of one block from the format's
// definition: row 8*b+k, n/8 bytes long, holds bit k of byte b of element i
// at bit i%8 of its byte i/8; blocks whose element count is not a multiple
// of 8 are stored as is.
func refBitUnshuffle(src []byte, ts int) []byte {
	n := len(src) / ts
	dst := bytes.Clone(src)
	if n%8 != 0 {
		return dst
	}
	for i := range n {
		for b := range ts {
			var v byte
			for k := range 8 {
				row := src[(8*b+k)*(n/8):]
				v |= (row[i/8] >> (i % 8) & 1) << k
			}
			dst[i*ts+b] = v
		}
	}
	return dst
}

func TestShuffleBlocks(t *testing.T) {
	rng := testRNG(t)
	for ts := 1; ts <= 20; ts++ {
		for _, size := range []int{0, 1, ts - 1, ts, 7 * ts, 8 * ts, 8*ts + 1, 64 * ts, 64*ts + ts - 1, 72 * ts, 1000, 4096 + 3,
			256 * ts, 256*ts + ts - 1, 288 * ts, 1032 * ts, 4096*ts + 1} {
			src := randomData(rng, size)
			got := make([]byte, size)
			unshuffleBlock(got, src, ts)
			if want := refUnshuffle(src, ts); !bytes.Equal(got, want) {
				t.Errorf("unshuffleBlock(%d bytes, typesize %d) differs from the definition at %d", size, ts, firstDiff(got, want))
			}
			back := make([]byte, size)
			shuffleBlock(back, got, ts)
			if !bytes.Equal(back, src) {
				t.Errorf("shuffleBlock(unshuffleBlock(%d bytes, typesize %d)) is not the identity", size, ts)
			}
			want := refBitUnshuffle(src, ts)
			bitUnshuffleBlock(got, src, make([]byte, size), ts)
			if !bytes.Equal(got, want) {
				t.Errorf("bitUnshuffleBlock(%d bytes, typesize %d) differs from the definition at %d", size, ts, firstDiff(got, want))
			}
			old := make([]byte, size)
			bitUnshuffleRef(old, src, ts)
			if !bytes.Equal(got, old) {
				t.Errorf("bitUnshuffleBlock(%d bytes, typesize %d) differs from the former implementation at %d", size, ts, firstDiff(got, old))
			}
			inPlace := bytes.Clone(src)
			bitUnshuffleBlock(inPlace, inPlace, make([]byte, size), ts)
			if !bytes.Equal(inPlace, want) {
				t.Errorf("bitUnshuffleBlock(%d bytes, typesize %d) in place differs from the definition at %d", size, ts, firstDiff(inPlace, want))
			}
			bitShuffleBlock(back, got, ts)
			if !bytes.Equal(back, src) {
				t.Errorf("bitShuffleBlock(bitUnshuffleBlock(%d bytes, typesize %d)) is not the identity", size, ts)
			}
		}
	}
}

// TestBitShuffleLayout pins the bit order on a hand-checked case: 8
// elements of 2 bytes, element i = 1<<i (byte 0) and 0x80 (byte 1).
func TestBitShuffleLayout(t *testing.T) {
	src := make([]byte, 16)
	for i := range 8 {
		src[2*i] = 1 << i
		src[2*i+1] = 0x80
	}
	shuffled := make([]byte, 16)
	bitShuffleBlock(shuffled, src, 2)
	// Row 8*b+k has one byte: bit i = bit k of byte b of element i. Byte 0
	// of element i has only bit i set, so row k = 1<<k; byte 1 is 0x80 in
	// every element, so row 15 is all ones and rows 8..14 are zero.
	want := []byte{1, 2, 4, 8, 16, 32, 64, 128, 0, 0, 0, 0, 0, 0, 0, 0xff}
	if !bytes.Equal(shuffled, want) {
		t.Errorf("bitShuffleBlock = %x, want %x", shuffled, want)
	}
}

func TestTransposeBits8(t *testing.T) {
	rng := testRNG(t)
	for range 1000 {
		x := rng.Uint64()
		var want uint64
		for k := range 8 {
			for j := range 8 {
				want |= (x >> (8*k + j) & 1) << (8*j + k)
			}
		}
		if got := transposeBits8(x); got != want {
			t.Fatalf("transposeBits8(%#x) = %#x, want %#x", x, got, want)
		}
	}
	for range 1000 {
		var r, want [8]uint64
		for k := range r {
			r[k] = rng.Uint64()
		}
		// Word k holds bit k of the bytes of elements 8j+m (bit m of its
		// byte j); word j of the result holds their bytes (byte m).
		for k := range 8 {
			for j := range 8 {
				for m := range 8 {
					want[j] |= (r[k] >> (8*j + m) & 1) << (8*m + k)
				}
			}
		}
		var got [8]uint64
		got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7] = transposeRows(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])
		if got != want {
			t.Fatalf("transposeRows(%x) = %x, want %x", r, got, want)
		}
	}
	if got := transposeBits8(0x8040201008040201); got != 0x8040201008040201 || bits.OnesCount64(transposeBits8(0xff)) != 8 {
		t.Errorf("transposeBits8 moves the diagonal or loses bits")
	}
}

// TestUnshuffleChunk checks the exported helpers over whole chunks with a
// shorter last block, against block-by-block reference results.
func TestUnshuffleChunk(t *testing.T) {
	rng := testRNG(t)
	for _, ts := range []int{1, 2, 3, 4, 8, 16} {
		for _, tc := range []struct{ blocksize, nbytes int }{{128, 1000}, {4096, 4096*3 + 40}, {64, 64}, {4096, 100}} {
			blocksize, nbytes := tc.blocksize*ts, tc.nbytes*ts
			src := randomData(rng, nbytes+5)
			var wantByte, wantBit []byte
			for start := 0; start < nbytes; start += blocksize {
				end := min(start+blocksize, nbytes)
				wantByte = append(wantByte, refUnshuffle(src[start:end], ts)...)
				wantBit = append(wantBit, refBitUnshuffle(src[start:end], ts)...)
			}
			dst := make([]byte, nbytes)
			if err := Unshuffle(dst, src, ts, blocksize, nbytes); err != nil || !bytes.Equal(dst, wantByte) {
				t.Errorf("Unshuffle(typesize %d, blocksize %d, nbytes %d): %v, differs at %d", ts, blocksize, nbytes, err, firstDiff(dst, wantByte))
			}
			if err := BitUnshuffle(dst, src, ts, blocksize, nbytes); err != nil || !bytes.Equal(dst, wantBit) {
				t.Errorf("BitUnshuffle(typesize %d, blocksize %d, nbytes %d): %v, differs at %d", ts, blocksize, nbytes, err, firstDiff(dst, wantBit))
			}
		}
	}
}

func TestUnshuffleArgs(t *testing.T) {
	buf := make([]byte, 64)
	tests := []struct {
		dst, src                    []byte
		typesize, blocksize, nbytes int
		short                       bool
	}{
		{buf, buf, 0, 16, 64, false},
		{buf, buf, 256, 16, 64, false},
		{buf, buf, 4, 0, 64, false},
		{buf, buf, 4, 16, -1, false},
		{buf[:10], buf, 4, 16, 64, true},
		{buf, buf[:10], 4, 16, 64, true},
	}
	for _, tt := range tests {
		for name, f := range map[string]func([]byte, []byte, int, int, int) error{"Unshuffle": Unshuffle, "BitUnshuffle": BitUnshuffle} {
			err := f(tt.dst, tt.src, tt.typesize, tt.blocksize, tt.nbytes)
			if err == nil || errors.Is(err, io.ErrShortBuffer) != tt.short {
				t.Errorf("%s(len %d, len %d, %d, %d, %d) = %v", name, len(tt.dst), len(tt.src), tt.typesize, tt.blocksize, tt.nbytes, err)
			}
		}
	}
}
