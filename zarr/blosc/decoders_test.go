package blosc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// zarrbenchData is n bytes of the public zarr benchmark's uint16 values,
// (x + y²/32 + z³) mod 65536 over planes of 256x256 from plane z0.
func zarrbenchData(n, z0 int) []byte {
	b := make([]byte, n)
	for i := range n / 2 {
		z, y, x := i/65536+z0, i/256%256, i%256
		binary.LittleEndian.PutUint16(b[2*i:], uint16(x+y*y/32+z*z*z))
	}
	return b
}

// TestDecodersMatchFormer decodes chunks of every kind of data, each
// shuffle and several typesizes and block sizes, compressed by blosclz and
// by zstd, with Decode and with the decoders the package had before its
// fast blosclz and bit unshuffle (formerDecode), and requires the same
// bytes; and every blosclz stream with decodeBloscLZ and decodeBloscLZRef.
func TestDecodersMatchFormer(t *testing.T) {
	rng := testRNG(t)
	inputs := map[string][]byte{
		"random":    randomData(rng, 40000),
		"smooth":    smoothData(rng, 100000, 2),
		"far":       farData(rng, 50000),
		"runs":      bytes.Repeat([]byte{3, 3, 3, 3, 9}, 20000),
		"zarrbench": zarrbenchData(1<<19, int(rng.IntN(1000))),
	}
	for name, raw := range inputs {
		for _, c := range []Compressor{BloscLZ, Zstd} {
			for _, sh := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
				for _, ts := range []int{1, 2, 4, 8, 3} {
					for _, bs := range []int{0, 5000} {
						// zstd's level 1 is quick: it is here for the
						// unshuffles, blosclz for the codec too.
						o := Options{Compressor: c, Level: 9, Shuffle: sh, Typesize: ts, Blocksize: bs}
						if c == Zstd {
							o.Level = 1
						}
						label := fmt.Sprintf("%s %+v", name, o)
						frame, err := Encode(raw, o)
						if err != nil {
							t.Fatalf("%s: %v", label, err)
						}
						got := make([]byte, len(raw))
						if _, err := Decode(got, frame); err != nil {
							t.Fatalf("%s: Decode: %v", label, err)
						}
						want, err := formerDecode(frame)
						if err != nil || !bytes.Equal(got, want) || !bytes.Equal(got, raw) {
							t.Fatalf("%s: Decode differs from the former decoders (%v) at %d, from the input at %d", label, err, firstDiff(got, want), firstDiff(got, raw))
						}
						checkStreams(t, label, frame)
					}
				}
			}
		}
	}
}

// checkStreams decodes every blosclz stream of frame with decodeBloscLZ
// and decodeBloscLZRef, which must agree: the same bytes, or both an
// error, also into outputs one byte short and one byte long.
func checkStreams(t *testing.T, label string, frame []byte) {
	t.Helper()
	f, err := Parse(frame)
	if err != nil || f.Header.Compressor() != BloscLZ {
		return
	}
	for _, s := range f.Streams {
		if s.Raw {
			continue
		}
		in := frame[s.Src : s.Src+s.CSize]
		for _, n := range []int{s.Size, s.Size - 1, s.Size + 1} {
			if err := sameBloscLZ(in, n); err != nil {
				t.Fatalf("%s: stream %+v into %d bytes: %v", label, s, n, err)
			}
		}
	}
}

// sameBloscLZ decodes stream into n bytes with both decoders and says how
// they disagree, if they do.
func sameBloscLZ(stream []byte, n int) error {
	got, want := make([]byte, n), make([]byte, n)
	gerr, werr := decodeBloscLZ(got, stream), decodeBloscLZRef(want, stream)
	switch {
	case (gerr == nil) != (werr == nil):
		return fmt.Errorf("decodeBloscLZ: %v; decodeBloscLZRef: %v", gerr, werr)
	case gerr == nil && !bytes.Equal(got, want):
		return fmt.Errorf("decodeBloscLZ differs from decodeBloscLZRef at %d", firstDiff(got, want))
	}
	return nil
}

// FuzzBloscLZ decodes arbitrary streams with decodeBloscLZ and with
// decodeBloscLZRef into outputs of arbitrary size: they must agree (the
// same bytes, or both an error). Seeds: testdata/fuzz/FuzzBloscLZ and
// streams of the encoder.
func FuzzBloscLZ(f *testing.F) {
	table := new([1 << blosclzTableBits]int32)
	for _, in := range [][]byte{zarrbenchData(4096, 7), bytes.Repeat([]byte("abcdefgh"), 100), farData(testRNG(f), 20000)} {
		buf := make([]byte, len(in))
		if n := encodeBloscLZ(buf, in, table); n > 0 {
			f.Add(buf[:n], uint16(len(in)))
		}
	}
	f.Fuzz(func(t *testing.T, stream []byte, n uint16) {
		if err := sameBloscLZ(stream, int(n)); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzBitUnshuffle unshuffles arbitrary blocks with every typesize up to 16
// through bitUnshuffleBlock, apart and in place, and requires the bytes of
// the former implementation (bitUnshuffleRef) and of the definition
// (refBitUnshuffle). Seeds: testdata/fuzz/FuzzBitUnshuffle.
func FuzzBitUnshuffle(f *testing.F) {
	// typesize is the seed's byte + 1: 2, 4 and 8 over 256 elements and
	// more reach the vector kernels, 3 the byte-by-byte path.
	f.Add(zarrbenchData(4096, 3), uint8(1))
	f.Add(zarrbenchData(4096+3, 5), uint8(3))
	f.Add(bytes.Repeat([]byte{0x5a, 0xc3, 0x01, 0x77}, 1024), uint8(7))
	f.Add(bytes.Repeat([]byte{0x5a, 0xc3, 0x01}, 700), uint8(2))
	f.Fuzz(func(t *testing.T, src []byte, typesize uint8) {
		src = src[:min(len(src), 1<<13)] // the definition is slow; 8 KiB reach every path
		ts := int(typesize%16) + 1
		want := refBitUnshuffle(src, ts)
		former := make([]byte, len(src))
		bitUnshuffleRef(former, src, ts)
		got := make([]byte, len(src))
		bitUnshuffleBlock(got, src, make([]byte, len(src)), ts)
		inPlace := bytes.Clone(src)
		bitUnshuffleBlock(inPlace, inPlace, make([]byte, len(src)), ts)
		if !bytes.Equal(got, want) || !bytes.Equal(former, want) || !bytes.Equal(inPlace, want) {
			t.Fatalf("typesize %d, %d bytes: bitUnshuffleBlock differs from the definition at %d (in place at %d), the former at %d",
				ts, len(src), firstDiff(got, want), firstDiff(inPlace, want), firstDiff(former, want))
		}
	})
}
