package blosc

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestDecodeBlocks decodes chunks of every compressor and shuffle, a
// shorter last block and memcpyed chunks included, in random ranges of
// blocks at once, and checks the result against Decode (DecodeBlocks) or
// DecodeNoUnshuffle (DecodeBlocksNoUnshuffle); a range alone must write
// only its blocks' bytes.
func TestDecodeBlocks(t *testing.T) {
	rng := testRNG(t)
	type variant struct {
		name   string
		whole  func(dst, src []byte) (int, error)
		blocks func(dst, src []byte, from, to int) error
	}
	variants := []variant{{"unshuffled", Decode, DecodeBlocks}, {"shuffled", DecodeNoUnshuffle, DecodeBlocksNoUnshuffle}}
	for _, c := range compressors {
		for _, s := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			for _, kind := range []string{"smooth", "random"} {
				for _, v := range variants {
					n, ts := 37*1024+6, 2
					raw := smoothData(rng, n, ts)
					if kind == "random" {
						raw = randomData(rng, n) // memcpyed
					}
					name := fmt.Sprintf("%s-%s-%s-%s", c, s, kind, v.name)
					frame, err := Encode(raw, Options{Compressor: c, Level: 5, Shuffle: s, Typesize: ts, Blocksize: 4096})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					h, err := ParseHeader(frame)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					nb := h.Blocks()
					if want := (n + h.Blocksize - 1) / h.Blocksize; !h.Memcpyed() && nb != want {
						t.Fatalf("%s: Blocks() = %d, want %d", name, nb, want)
					}
					want := make([]byte, n)
					if _, err := v.whole(want, frame); err != nil {
						t.Fatalf("%s: whole: %v", name, err)
					}
					// Cut the blocks into random ranges, decoded at once.
					var cuts []int
					for b := 0; b < nb; b += 1 + rng.IntN(3) {
						cuts = append(cuts, b)
					}
					cuts = append(cuts, nb)
					got := bytes.Repeat([]byte{0xa5}, n)
					var wg sync.WaitGroup
					errs := make([]error, len(cuts)-1)
					for i := range errs {
						wg.Go(func() { errs[i] = v.blocks(got, frame, cuts[i], cuts[i+1]) })
					}
					wg.Wait()
					for i, err := range errs {
						if err != nil {
							t.Fatalf("%s: DecodeBlocks(%d, %d): %v", name, cuts[i], cuts[i+1], err)
						}
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: DecodeBlocks in ranges %v differs from Decode at %d", name, cuts, firstDiff(got, want))
					}
					if h.Memcpyed() {
						continue
					}
					// One range alone writes its blocks and nothing else.
					from := rng.IntN(nb)
					to := from + 1 + rng.IntN(nb-from)
					got = bytes.Repeat([]byte{0xa5}, n)
					if err := v.blocks(got, frame, from, to); err != nil {
						t.Fatalf("%s: DecodeBlocks(%d, %d): %v", name, from, to, err)
					}
					lo, hi := from*h.Blocksize, min(to*h.Blocksize, n)
					if !bytes.Equal(got[lo:hi], want[lo:hi]) {
						t.Errorf("%s: DecodeBlocks(%d, %d) differs from Decode", name, from, to)
					}
					if bytes.Count(got[:lo], []byte{0xa5}) != lo || bytes.Count(got[hi:], []byte{0xa5}) != n-hi {
						t.Errorf("%s: DecodeBlocks(%d, %d) wrote outside bytes [%d, %d)", name, from, to, lo, hi)
					}
				}
			}
		}
	}
}

// TestDecodeBlocksErrors checks the ranges DecodeBlocks refuses and that a
// range's corrupt stream is reported.
func TestDecodeBlocksErrors(t *testing.T) {
	raw := smoothData(testRNG(t), 20000, 4)
	frame, err := Encode(raw, Options{Compressor: LZ4, Level: 5, Shuffle: ByteShuffle, Typesize: 4, Blocksize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := ParseHeader(frame)
	dst := make([]byte, len(raw))
	for _, r := range [][2]int{{-1, 1}, {2, 1}, {0, h.Blocks() + 1}} {
		if err := DecodeBlocks(dst, frame, r[0], r[1]); err == nil {
			t.Errorf("DecodeBlocks(%d, %d) of %d blocks = nil, want an error", r[0], r[1], h.Blocks())
		}
	}
	if err := DecodeBlocks(dst[:len(raw)-1], frame, 0, 1); err == nil {
		t.Error("DecodeBlocks into a short dst = nil, want an error")
	}
	// Break the last block's first stream length: only ranges reaching it
	// fail.
	bad := append([]byte(nil), frame...)
	last := h.Blocks() - 1
	at := int(bad[HeaderSize+4*last]) | int(bad[HeaderSize+4*last+1])<<8 | int(bad[HeaderSize+4*last+2])<<16
	bad[at+3] = 0x7f
	if err := DecodeBlocks(dst, bad, 0, last); err != nil {
		t.Errorf("DecodeBlocks(0, %d) of a chunk corrupt in block %d: %v", last, last, err)
	}
	if err := DecodeBlocks(dst, bad, last, last+1); err == nil {
		t.Errorf("DecodeBlocks(%d, %d) of a chunk corrupt there = nil, want an error", last, last+1)
	}
}
