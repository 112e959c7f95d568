package nvcomp

import (
	"encoding/binary"
	"strconv"
)

// ZstdReason says whether a zstd chunk may be sent to nvCOMP, and if not,
// why it must be decoded on the CPU. ZstdGPU (zero) means the GPU may
// take it.
type ZstdReason uint8

// Reasons returned by ZstdGPUReason.
const (
	// ZstdGPU: one frame, with a content size equal to the expected size,
	// no dictionary; nvCOMP decodes it.
	ZstdGPU ZstdReason = iota
	// ZstdEmpty: the expected size is zero (nothing to decode on a GPU).
	ZstdEmpty
	// ZstdTruncated: the chunk ends inside a frame header, a block or a
	// checksum, or a frame has no last block.
	ZstdTruncated
	// ZstdNotZstd: no zstd frame magic where a frame must start.
	ZstdNotZstd
	// ZstdReserved: a reserved bit of a frame header, or a reserved block
	// type, is set; the data is invalid.
	ZstdReserved
	// ZstdDictionary: a frame needs a dictionary, which the batched API
	// cannot take.
	ZstdDictionary
	// ZstdNoContentSize: a frame omits Frame_Content_Size (tensorstore and
	// other streaming writers do this).
	ZstdNoContentSize
	// ZstdMultiFrame: more than one zstd frame.
	ZstdMultiFrame
	// ZstdSkippable: the chunk holds a skippable frame.
	ZstdSkippable
	// ZstdChecksum: the frame carries a content checksum, which nvCOMP
	// does not verify; the CPU decoder does.
	ZstdChecksum
	// ZstdWindow: the frame declares a window over 8 MiB, the most that
	// RFC 8878 asks decoders to support.
	ZstdWindow
	// ZstdSizeMismatch: the frame's content size differs from the expected
	// size; the chunk is corrupt or of another shape, and the CPU decoder
	// reports it.
	ZstdSizeMismatch
	// ZstdTooLarge: the chunk or its content exceeds nvCOMP's 2^31-1 byte
	// limit per chunk.
	ZstdTooLarge
)

// String returns a short lowercase phrase for logs and statistics.
func (r ZstdReason) String() string {
	switch r {
	case ZstdGPU:
		return "gpu"
	case ZstdEmpty:
		return "empty"
	case ZstdTruncated:
		return "truncated"
	case ZstdNotZstd:
		return "not zstd"
	case ZstdReserved:
		return "reserved bits set"
	case ZstdDictionary:
		return "needs a dictionary"
	case ZstdNoContentSize:
		return "no content size"
	case ZstdMultiFrame:
		return "several frames"
	case ZstdSkippable:
		return "skippable frame"
	case ZstdChecksum:
		return "content checksum"
	case ZstdWindow:
		return "window over 8 MiB"
	case ZstdSizeMismatch:
		return "content size mismatch"
	case ZstdTooLarge:
		return "too large"
	}
	return "nvcomp.ZstdReason(" + strconv.Itoa(int(r)) + ")"
}

// Frame magics (RFC 8878 §3.1.1, §3.1.2).
const (
	maxWindow          = 8 << 20 // RFC 8878 §3.1.1.1.2: decoders should support 8 MiB
	zstdMagic          = 0xFD2FB528
	skippableMagicMask = 0xFFFFFFF0
	skippableMagic     = 0x184D2A50
)

// ZstdGPUCompatible reports whether chunk, which must decode to want bytes,
// may be decoded by nvCOMP. It is ZstdGPUReason(chunk, want) == ZstdGPU.
func ZstdGPUCompatible(chunk []byte, want int) bool {
	return ZstdGPUReason(chunk, want) == ZstdGPU
}

// ZstdGPUReason decides from the frame headers and block headers alone
// whether nvCOMP may decode chunk, a zarr zstd chunk that must decode to
// exactly want bytes. It reads the frame header and then hops over the
// blocks by their 3-byte headers, so it costs a few dozen byte loads per
// 128 KiB block and never allocates.
//
// Only the plain case goes to the GPU: exactly one frame, whose
// Frame_Content_Size equals want, with no dictionary, no content checksum
// and a window of at most 8 MiB, and whose blocks all lie inside the chunk.
// Everything else goes to the CPU decoder, which decodes it or reports the
// error. This is what nvCOMP 5.3.0 and 6.0.0 do with the other cases
// (measured on an H200; TestZstdFrameFeatures reruns the measurement):
//
//   - nvCOMP does not bound its writes by the output capacity: a frame
//     whose content is larger than the capacity is written past the end of
//     the output buffer, into the neighbours' outputs, with a success
//     status. Hence the rule Frame_Content_Size == want, which bounds the
//     write by the header nvCOMP trusts.
//   - Frames without Frame_Content_Size decode correctly when the capacity
//     holds them (the reported size is the content's), and overrun the
//     buffer when it does not, which cannot be known before decoding.
//   - Of several frames in a chunk only the first is decoded, with a
//     success status and the first frame's size.
//   - Content checksums are not verified: a frame with a corrupted
//     checksum, or with corrupted data under a good checksum, decodes with
//     a success status. Sending such frames to the CPU keeps the checksum
//     meaningful. (tensorstore and zarr-python write no checksum unless
//     asked.)
//   - A leading skippable frame makes nvCOMP fault (an illegal or
//     misaligned address, which ends the CUDA context); a trailing one is
//     ignored.
//   - A window of 128 MiB on a frame with a content size decoded
//     correctly; windows over 8 MiB stay on the CPU anyway, as no zarr
//     writer makes them and nothing larger was tested.
//
// What no header scan can see is damage inside compressed blocks. Of 48
// such chunks routed to nvCOMP 6.0, 45 decoded to the same bytes as on the
// CPU (garbage both ways: zstd without a checksum cannot tell), 2 decoded
// with success where the CPU decoder reported corruption, and 1 never
// finished. Stores that need that caught carry a crc32c codec after zstd,
// which is checked on the host before a chunk is routed.
//
// tensorstore 0.1.85 writes Frame_Content_Size in its zarr v2 and v3 zstd
// chunks (single-segment frames up to 4 MiB, windowed frames beyond), so
// its chunks take the GPU path.
func ZstdGPUReason(chunk []byte, want int) ZstdReason {
	if want <= 0 {
		return ZstdEmpty
	}
	if int64(want) > Zstd.maxChunkBytes() || int64(len(chunk)) > Zstd.maxChunkBytes() {
		return ZstdTooLarge
	}
	f, r := scanZstdFrame(chunk)
	if r != ZstdGPU {
		return r
	}
	if f.dictionary {
		return ZstdDictionary
	}
	if f.window > maxWindow {
		return ZstdWindow
	}
	if f.contentSize < 0 {
		return ZstdNoContentSize
	}
	if f.end < len(chunk) {
		rest := chunk[f.end:]
		if len(rest) >= 4 && binary.LittleEndian.Uint32(rest)&skippableMagicMask == skippableMagic {
			return ZstdSkippable
		}
		return ZstdMultiFrame
	}
	if f.contentSize != int64(want) {
		return ZstdSizeMismatch
	}
	if f.checksum {
		return ZstdChecksum
	}
	return ZstdGPU
}

// zstdFrame is what scanZstdFrame learns about the first frame of a chunk.
type zstdFrame struct {
	end         int   // offset just past the frame (after its checksum)
	contentSize int64 // Frame_Content_Size, or -1 when the header omits it
	window      int64 // Window_Size; the content size for a single-segment frame
	checksum    bool  // Content_Checksum_flag
	dictionary  bool  // a non-zero Dictionary_ID
}

// scanZstdFrame parses the frame header at the start of b (RFC 8878
// §3.1.1.1) and hops over its blocks (§3.1.1.2). It returns ZstdGPU as the
// reason when the frame is well formed as far as headers tell.
func scanZstdFrame(b []byte) (zstdFrame, ZstdReason) {
	var f zstdFrame
	if len(b) < 4 {
		return f, ZstdTruncated
	}
	magic := binary.LittleEndian.Uint32(b)
	if magic&skippableMagicMask == skippableMagic {
		return f, ZstdSkippable
	}
	if magic != zstdMagic {
		return f, ZstdNotZstd
	}
	p := 4
	if len(b) < p+1 {
		return f, ZstdTruncated
	}
	fhd := b[p]
	p++
	fcsFlag := fhd >> 6
	singleSegment := fhd>>5&1 == 1
	if fhd>>3&1 == 1 { // Reserved_bit
		return f, ZstdReserved
	}
	f.checksum = fhd>>2&1 == 1
	dictIDSize := [4]int{0, 1, 2, 4}[fhd&3]
	fcsSize := [4]int{0, 2, 4, 8}[fcsFlag]
	if fcsFlag == 0 && singleSegment {
		fcsSize = 1
	}
	if !singleSegment {
		if len(b) < p+1 {
			return f, ZstdTruncated
		}
		exp, mantissa := int64(b[p]>>3), int64(b[p]&7)
		base := int64(1) << (10 + exp)
		f.window = base + base/8*mantissa
		p++
	}
	if len(b) < p+dictIDSize+fcsSize {
		return f, ZstdTruncated
	}
	var dictID uint32
	for i := range dictIDSize {
		dictID |= uint32(b[p+i]) << (8 * i)
	}
	f.dictionary = dictID != 0
	p += dictIDSize
	switch fcsSize {
	case 0:
		f.contentSize = -1
	case 1:
		f.contentSize = int64(b[p])
	case 2:
		f.contentSize = int64(binary.LittleEndian.Uint16(b[p:])) + 256
	case 4:
		f.contentSize = int64(binary.LittleEndian.Uint32(b[p:]))
	case 8:
		v := binary.LittleEndian.Uint64(b[p:])
		if v > 1<<62 {
			return f, ZstdTooLarge
		}
		f.contentSize = int64(v)
	}
	p += fcsSize
	if singleSegment {
		f.window = f.contentSize
	}
	for {
		if len(b)-p < 3 {
			return f, ZstdTruncated
		}
		h := uint32(b[p]) | uint32(b[p+1])<<8 | uint32(b[p+2])<<16
		p += 3
		last := h&1 == 1
		size := int(h >> 3)
		switch h >> 1 & 3 {
		case 0, 2: // Raw_Block, Compressed_Block: size bytes follow
		case 1: // RLE_Block: one byte follows
			size = 1
		case 3:
			return f, ZstdReserved
		}
		if len(b)-p < size {
			return f, ZstdTruncated
		}
		p += size
		if last {
			break
		}
	}
	if f.checksum {
		if len(b)-p < 4 {
			return f, ZstdTruncated
		}
		p += 4
	}
	f.end = p
	return f, ZstdGPU
}
