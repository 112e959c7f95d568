package blosc

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary chunks to the decoder. Seeds: the committed
// fixtures and testdata/fuzz/FuzzDecode. Beyond never panicking, it checks
// that ParseHeader, Parse and Decode agree on what is valid, that a decoded
// chunk's streams tile its output, that DecodeNoUnshuffle plus the exported
// unshuffles give Decode's result, and that the result round-trips through
// Encode.
func FuzzDecode(f *testing.F) {
	_, chunks := readFixtures(f)
	for _, c := range chunks {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, chunk []byte) {
		h, herr := ParseHeader(chunk)
		fr, perr := Parse(chunk)
		if herr != nil {
			if perr == nil {
				t.Fatalf("Parse accepts a chunk ParseHeader rejects (%v)", herr)
			}
			if _, err := Decode(make([]byte, 64), chunk); err == nil {
				t.Fatalf("Decode accepts a chunk ParseHeader rejects (%v)", herr)
			}
			return
		}
		// The caller sizes the destination; do not let the header do it.
		if h.Nbytes > 1<<20 {
			return
		}
		dst := make([]byte, h.Nbytes)
		n, err := Decode(dst, chunk)
		if perr != nil {
			if err == nil {
				t.Fatalf("Decode accepts a chunk Parse rejects (%v)", perr)
			}
			return
		}
		if err != nil {
			return
		}
		if n != h.Nbytes || fr.Header != h {
			t.Fatalf("Decode = %d, header %+v; Parse header %+v", n, h, fr.Header)
		}
		end := 0
		for _, s := range fr.Streams {
			if s.Dst != end || s.Size <= 0 || s.Src+s.CSize > h.Cbytes || s.Raw != (s.CSize == s.Size) {
				t.Fatalf("stream %+v after output offset %d", s, end)
			}
			end += s.Size
		}
		if end != h.Nbytes {
			t.Fatalf("streams cover %d bytes of %d", end, h.Nbytes)
		}
		shuffled := make([]byte, h.Nbytes)
		if _, err := DecodeNoUnshuffle(shuffled, chunk); err != nil {
			t.Fatalf("Decode succeeds, DecodeNoUnshuffle fails: %v", err)
		}
		un := shuffled
		switch h.Shuffle() {
		case ByteShuffle:
			un = make([]byte, h.Nbytes)
			err = Unshuffle(un, shuffled, h.Typesize, h.Blocksize, h.Nbytes)
		case BitShuffle:
			un = make([]byte, h.Nbytes)
			err = BitUnshuffle(un, shuffled, h.Typesize, h.Blocksize, h.Nbytes)
		}
		if err != nil || !bytes.Equal(un, dst) {
			t.Fatalf("%s of DecodeNoUnshuffle: %v, differs from Decode at %d", h.Shuffle(), err, firstDiff(un, dst))
		}
		c := h.Compressor()
		if c > Zstd {
			c = LZ4
		}
		re, err := Encode(dst, Options{Compressor: c, Level: 1, Shuffle: h.Shuffle(), Typesize: h.Typesize})
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		again := make([]byte, h.Nbytes)
		if _, err := Decode(again, re); err != nil || !bytes.Equal(again, dst) {
			t.Fatalf("Decode(Encode(decoded)): %v, differs at %d", err, firstDiff(again, dst))
		}
	})
}
