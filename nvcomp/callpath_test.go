package nvcomp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/damacy-go/damacy/cuda"
	"github.com/ebitengine/purego"
	"github.com/klauspost/compress/zstd"
)

// TestDecodeCallPaths decodes the same batches through Decode (on amd64,
// SyscallN with the options struct spelled as eight stack words) and
// through a RegisterFunc binding of the same entry point (purego's own
// struct ABI), and requires the same statuses, sizes and bytes. The zstd
// batch includes a frame without a content size decoded into a larger
// buffer, whose reported size is not the capacity.
func TestDecodeCallPaths(t *testing.T) {
	lib, e := gpuEnv(t)
	if lib.Version.Major < 5 {
		t.Skipf("nvCOMP %s passes no options struct", lib.Version)
	}
	r := newRand(t)
	const size = 96 << 10
	for _, alg := range []Algorithm{Zstd, LZ4} {
		var chunks [2][]*gpuChunk
		for kind, src := range testSources(r, size) {
			var in [][]byte
			caps := []int{size}
			if alg == Zstd {
				in = [][]byte{zstdEncode(t, src, zstd.SpeedDefault, false), zstdEncodeNoSize(t, src, zstd.SpeedFastest, false)}
				caps = append(caps, size+4096)
			} else {
				in = [][]byte{lz4Encode(t, src, true)}
			}
			for i := range in {
				for p := range chunks {
					chunks[p] = append(chunks[p], &gpuChunk{name: fmt.Sprintf("%s/%d", kind, i), in: in[i], capacity: caps[i]})
				}
			}
		}
		dec := newDecoder(t, lib, e, DecoderConfig{Algorithm: alg, MaxChunks: len(chunks[0]), MaxChunkBytes: size + 4096})
		var raw func(inPtrs, inBytes, outCapacities, outSizes, n, temp, tempBytes, outPtrs uintptr, opts decompressOpts, statuses, stream uintptr) Status
		purego.RegisterFunc(&raw, dec.codec.decompressAsync)
		registered := func(s cuda.Stream, b *Batch) error {
			return check(dec.codec.symbol("DecompressAsync"), raw(uintptr(b.CompressedPtrs), uintptr(b.CompressedBytes),
				uintptr(b.OutputCapacities), uintptr(b.OutputSizes), uintptr(b.N), uintptr(dec.temp), uintptr(dec.tempBytes),
				uintptr(b.OutputPtrs), defaultOpts(), uintptr(b.Statuses), uintptr(s)))
		}
		for p, decode := range []func(cuda.Stream, *Batch) error{dec.Decode, registered} {
			if err := decodeBatch(e, decode, "call paths", chunks[p], layout{guard: 4096}); err != nil {
				t.Fatalf("%v, path %d: %v", alg, p, err)
			}
		}
		for i, a := range chunks[0] {
			b := chunks[1][i]
			if a.status != b.status || a.size != b.size || !bytes.Equal(a.out[:min(a.size, uint64(len(a.out)))], b.out[:min(b.size, uint64(len(b.out)))]) {
				t.Errorf("%v %s: Decode gives %v, %d bytes; the RegisterFunc binding %v, %d bytes (or other bytes)", alg, a.name, a.status, a.size, b.status, b.size)
			}
			if a.status != StatusSuccess || a.size != size || a.overrun {
				t.Errorf("%v %s: %v, %d bytes, overrun %v; want success with %d bytes", alg, a.name, a.status, a.size, a.overrun, size)
			}
		}
	}
}
