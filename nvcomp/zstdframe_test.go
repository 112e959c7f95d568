package nvcomp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// TestZstdGPUReasonEncoders checks the scanner on frames from klauspost's
// encoders at every level, with and without checksums, on random and
// smooth data of several sizes, and on the ways chunks differ from the plain
// single frame.
func TestZstdGPUReasonEncoders(t *testing.T) {
	r := newRand(t)
	for _, size := range []int{300, 64 << 10, 256<<10 + 6, 1 << 20} {
		for _, kind := range []string{"random", "smooth"} {
			var data []byte
			if kind == "random" {
				data = randomBytes(r, size)
			} else {
				data = smoothU16(r, size+1, 256, 4)[:size]
			}
			for _, level := range zstdLevels {
				for _, sum := range []bool{false, true} {
					name := fmt.Sprintf("%s/%d/%v/checksum=%v", kind, size, level, sum)
					frame := zstdEncode(t, data, level, sum)
					stream := zstdEncodeNoSize(t, data, level, sum)
					if got, err := cpuZstd(stream, size); err != nil || !bytes.Equal(got, data) {
						t.Fatalf("%s: klauspost decodes the frame without content size to %d bytes, %v", name, len(got), err)
					}
					other := zstdEncode(t, randomBytes(r, 1+r.IntN(1000)), level, sum)
					one := ZstdGPU
					if sum {
						one = ZstdChecksum
					}
					tests := []struct {
						what  string
						chunk []byte
						want  int
						out   ZstdReason
					}{
						{"one frame", frame, size, one},
						{"wrong size", frame, size + 1, ZstdSizeMismatch},
						{"zero size", frame, 0, ZstdEmpty},
						{"no content size", stream, size, ZstdNoContentSize},
						{"two frames", append(append([]byte{}, frame...), other...), size, ZstdMultiFrame},
						{"leading skippable", append(skippableFrame(r, r.IntN(64)), frame...), size, ZstdSkippable},
						{"trailing skippable", append(append([]byte{}, frame...), skippableFrame(r, r.IntN(64))...), size, ZstdSkippable},
						{"trailing garbage", append(append([]byte{}, frame...), 1, 2, 3, 4, 5), size, ZstdMultiFrame},
					}
					for _, tt := range tests {
						if got := ZstdGPUReason(tt.chunk, tt.want); got != tt.out {
							t.Errorf("%s: %s: ZstdGPUReason(%d bytes, %d) = %v; want %v", name, tt.what, len(tt.chunk), tt.want, got, tt.out)
						}
					}
					f, reason := scanZstdFrame(frame)
					if reason != ZstdGPU || f.checksum != sum || f.end != len(frame) || f.contentSize != int64(size) {
						t.Errorf("%s: scanZstdFrame = %+v, %v; want checksum %v, end %d, content size %d",
							name, f, reason, sum, len(frame), size)
					}
				}
			}
		}
	}
}

// TestZstdGPUReasonPrefixes checks that no strict prefix of a valid frame is
// sent to the GPU: truncation is always seen from the headers.
func TestZstdGPUReasonPrefixes(t *testing.T) {
	r := newRand(t)
	for _, sum := range []bool{false, true} {
		data := smoothU16(r, 300<<10, 512, 6)
		for _, frame := range [][]byte{zstdEncode(t, data, zstd.SpeedDefault, sum), zstdEncodeNoSize(t, data, zstd.SpeedFastest, sum)} {
			for n := range len(frame) {
				got := ZstdGPUReason(frame[:n], len(data))
				if got == ZstdGPU {
					t.Fatalf("checksum=%v: prefix of %d of %d bytes: ZstdGPUReason = %v", sum, n, len(frame), got)
				}
				if f, reason := scanZstdFrame(frame[:n]); reason != ZstdTruncated {
					t.Fatalf("checksum=%v: prefix of %d of %d bytes: scanZstdFrame = %+v, %v; want %v", sum, n, len(frame), f, reason, ZstdTruncated)
				}
			}
		}
	}
}

// rawFrame builds a frame by hand: one Raw_Block holding data, with the
// content size written in fcsBytes bytes (0: omitted; 1 needs a single
// segment), an optional dictionary ID of dictBytes bytes, and no checksum.
func rawFrame(data []byte, fcsBytes int, single bool, dictBytes int, dictID uint32) []byte {
	fcsFlag := map[int]byte{0: 0, 1: 0, 2: 1, 4: 2, 8: 3}[fcsBytes]
	dictFlag := map[int]byte{0: 0, 1: 1, 2: 2, 4: 3}[dictBytes]
	fhd := fcsFlag<<6 | dictFlag
	if single {
		fhd |= 1 << 5
	}
	f := binary.LittleEndian.AppendUint32(nil, zstdMagic)
	f = append(f, fhd)
	if !single {
		f = append(f, 10<<3) // Window_Descriptor: 2^20 bytes
	}
	for i := range dictBytes {
		f = append(f, byte(dictID>>(8*i)))
	}
	size := uint64(len(data))
	switch fcsBytes {
	case 1:
		f = append(f, byte(size))
	case 2:
		f = binary.LittleEndian.AppendUint16(f, uint16(size-256))
	case 4:
		f = binary.LittleEndian.AppendUint32(f, uint32(size))
	case 8:
		f = binary.LittleEndian.AppendUint64(f, size)
	}
	h := uint32(len(data))<<3 | 1 // Raw_Block, Last_Block
	f = append(f, byte(h), byte(h>>8), byte(h>>16))
	return append(f, data...)
}

// TestZstdGPUReasonHeaders checks every Frame_Content_Size and
// Dictionary_ID encoding, reserved bits and block types on hand-made
// frames, and that klauspost decodes the valid ones to the same size.
func TestZstdGPUReasonHeaders(t *testing.T) {
	r := newRand(t)
	d200, d1000, d70000 := randomBytes(r, 200), randomBytes(r, 1000), randomBytes(r, 70000)
	tests := []struct {
		what  string
		chunk []byte
		want  int
		out   ZstdReason
	}{
		{"fcs 1 byte", rawFrame(d200, 1, true, 0, 0), 200, ZstdGPU},
		{"fcs 2 bytes", rawFrame(d1000, 2, true, 0, 0), 1000, ZstdGPU},
		{"fcs 2 bytes windowed", rawFrame(d1000, 2, false, 0, 0), 1000, ZstdGPU},
		{"fcs 4 bytes", rawFrame(d70000, 4, false, 0, 0), 70000, ZstdGPU},
		{"fcs 8 bytes", rawFrame(d1000, 8, true, 0, 0), 1000, ZstdGPU},
		{"fcs absent", rawFrame(d1000, 0, false, 0, 0), 1000, ZstdNoContentSize},
		{"dictionary id 0 in 4 bytes", rawFrame(d1000, 2, true, 4, 0), 1000, ZstdGPU},
		{"dictionary id 1 byte", rawFrame(d1000, 2, true, 1, 7), 1000, ZstdDictionary},
		{"dictionary id 2 bytes", rawFrame(d1000, 2, true, 2, 0x1234), 1000, ZstdDictionary},
		{"dictionary id 4 bytes", rawFrame(d1000, 4, false, 4, 0x12345678), 1000, ZstdDictionary},
		{"not zstd", d1000, 1000, ZstdNotZstd},
		{"three bytes", []byte{0x28, 0xb5, 0x2f}, 3, ZstdTruncated},
		{"magic only", binary.LittleEndian.AppendUint32(nil, zstdMagic), 1, ZstdTruncated},
		{"skippable only", skippableFrame(r, 10), 10, ZstdSkippable},
		{"too large", rawFrame(d200, 1, true, 0, 0), 1 << 31, ZstdTooLarge},
	}
	reserved := rawFrame(d1000, 2, true, 0, 0)
	reserved[4] |= 1 << 3
	tests = append(tests, struct {
		what  string
		chunk []byte
		want  int
		out   ZstdReason
	}{"reserved header bit", reserved, 1000, ZstdReserved})
	for _, w := range []struct {
		exp byte
		out ZstdReason
	}{{13, ZstdGPU}, {14, ZstdWindow}, {31, ZstdWindow}} {
		f := rawFrame(d1000, 2, false, 0, 0)
		f[5] = w.exp << 3
		tests = append(tests, struct {
			what  string
			chunk []byte
			want  int
			out   ZstdReason
		}{fmt.Sprintf("window 2^%d", 10+w.exp), f, 1000, w.out})
	}
	badBlock := rawFrame(d1000, 2, true, 0, 0)
	badBlock[7] |= 3 << 1 // block type 3
	tests = append(tests, struct {
		what  string
		chunk []byte
		want  int
		out   ZstdReason
	}{"reserved block type", badBlock, 1000, ZstdReserved})

	for _, tt := range tests {
		if got := ZstdGPUReason(tt.chunk, tt.want); got != tt.out {
			t.Errorf("%s: ZstdGPUReason(%d bytes, %d) = %v; want %v", tt.what, len(tt.chunk), tt.want, got, tt.out)
		}
		if tt.out == ZstdGPU && tt.want < 1<<20 {
			got, err := cpuZstd(tt.chunk, tt.want)
			if err != nil || len(got) != tt.want {
				t.Errorf("%s: klauspost decodes %d bytes, %v; want %d bytes", tt.what, len(got), err, tt.want)
			}
		}
	}
}

// TestZstdGPUReasonDictionary checks a frame from klauspost's dictionary
// encoder.
func TestZstdGPUReasonDictionary(t *testing.T) {
	r := newRand(t)
	dict := randomBytes(r, 4096)
	data := append(append([]byte{}, dict[:2000]...), randomBytes(r, 3000)...)
	e, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(0xC0FFEE, dict))
	if err != nil {
		t.Fatal(err)
	}
	frame := e.EncodeAll(data, nil)
	e.Close()
	if got := ZstdGPUReason(frame, len(data)); got != ZstdDictionary {
		t.Errorf("ZstdGPUReason(dictionary frame) = %v; want %v", got, ZstdDictionary)
	}
}

// TestZstdReasonString checks that every reason has its own name.
func TestZstdReasonString(t *testing.T) {
	seen := map[string]ZstdReason{}
	for r := ZstdGPU; r <= ZstdBadBlock; r++ {
		s := r.String()
		if prev, dup := seen[s]; dup {
			t.Errorf("reasons %d and %d are both %q", prev, r, s)
		}
		seen[s] = r
	}
	if got, want := ZstdReason(200).String(), "nvcomp.ZstdReason(200)"; got != want {
		t.Errorf("ZstdReason(200).String() = %q; want %q", got, want)
	}
}

// FuzzZstdGPUReason checks that the scanner never panics and that whatever
// it sends to the GPU is, for the CPU decoder, either invalid or exactly
// the expected size: the scanner never lets a size disagreement through.
func FuzzZstdGPUReason(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	data := smoothU16(r, 5000, 50, 4)
	f.Add(zstdEncode(f, data, zstd.SpeedDefault, true), len(data))
	f.Add(zstdEncodeNoSize(f, data, zstd.SpeedFastest, false), len(data))
	f.Add(rawFrame(data[:300], 2, false, 1, 9), 300)
	f.Add(append(skippableFrame(r, 3), zstdEncode(f, data, zstd.SpeedFastest, false)...), len(data))
	f.Fuzz(func(t *testing.T, chunk []byte, want int) {
		if want > 1<<20 {
			want = 1 << 20
		}
		if ZstdGPUReason(chunk, want) != ZstdGPU {
			return
		}
		got, err := cpuZstd(chunk, want)
		if err == nil && len(got) != want {
			t.Errorf("sent to the GPU, but the CPU decodes %d bytes; want %d", len(got), want)
		}
		if !bytes.Equal(chunk[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("sent to the GPU without the zstd magic: % x", chunk[:4])
		}
	})
}

// TestZstdGPUReasonLibzstd checks the scanner on frames from the reference
// encoder (libzstd through numcodecs, testdata/libzstd_frames.py: levels
// -5 to 22, several kinds of data and sizes): every one-shot frame goes to
// the GPU, so the block header checks never refuse valid data, and the CPU
// decoder agrees on its size.
func TestZstdGPUReasonLibzstd(t *testing.T) {
	py := zarrtest.MustHavePython(t, "numpy", "numcodecs")
	dir := t.TempDir()
	seed := strconv.FormatUint(zarrtest.Seed(t)%1_000_000_007, 10)
	if out, err := exec.Command(py, filepath.Join("testdata", "libzstd_frames.py"), dir, seed).CombinedOutput(); err != nil {
		t.Fatalf("libzstd_frames.py: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var frames []struct {
		Name  string
		Size  int
		Level int
		Kind  string
	}
	if err := json.Unmarshal(raw, &frames); err != nil {
		t.Fatal(err)
	}
	if len(frames) == 0 {
		t.Fatal("libzstd_frames.py wrote no frames")
	}
	for _, f := range frames {
		b, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if r := ZstdGPUReason(b, f.Size); r != ZstdGPU {
			t.Errorf("%s (%s, %d bytes, level %d): ZstdGPUReason = %v; want gpu", f.Name, f.Kind, f.Size, f.Level, r)
		}
		if got, err := cpuZstd(b, f.Size); err != nil || len(got) != f.Size {
			t.Errorf("%s: the CPU decodes %d bytes, %v; want %d", f.Name, len(got), err, f.Size)
		}
	}
	t.Logf("%d libzstd frames", len(frames))
}
