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
	// ZstdBadBlock: a block breaks the format in its headers: a block, or
	// the literals it regenerates, over Block_Maximum_Size; literals or
	// sequence headers that do not fit the block; a table reused before
	// one was defined; more decoded bytes than the frame's content size.
	// The data is damaged (valid encoders never write this), and damaged
	// headers are what made nvCOMP fault.
	ZstdBadBlock
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
	case ZstdBadBlock:
		return "damaged block"
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
// and a window of at most 8 MiB, and whose blocks all lie inside the chunk
// with headers that keep the format's limits (ZstdBadBlock: it also reads
// each compressed block's literals and sequences section headers).
// Everything else goes to the CPU decoder, which decodes it or reports the
// error. This is what nvCOMP 5.3.0 and 6.0.0 do with the other cases
// (TestZstdFrameFeatures checks each on a GPU):
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
// Damaged block and literals headers made nvCOMP 6.0 fault (an illegal
// address, which ends the CUDA context) or write past the output; with the
// block header checks, four runs of TestGPUCorruptInput (about 130 damaged
// chunks routed to the GPU each) saw neither. What no header scan can see
// is damage inside the entropy-coded data: most such chunks decode to the
// same bytes as on the CPU (garbage both ways: zstd without a checksum
// cannot tell), a few decode with success where the CPU decoder reports
// corruption, and some (2 to 9 of 130 per run, after random bit flips)
// never finish. Stores that need that caught carry a crc32c codec after
// zstd, which is checked on the host before a chunk is routed.
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
	// Block_Maximum_Size bounds every block's content and what it decodes
	// to (RFC 8878 §3.1.1.2.4); decoded counts what the block headers
	// promise at least.
	blockMax := min(f.window, 128<<10)
	var decoded int64
	var tables blockTables
	for {
		if len(b)-p < 3 {
			return f, ZstdTruncated
		}
		h := uint32(b[p]) | uint32(b[p+1])<<8 | uint32(b[p+2])<<16
		p += 3
		last := h&1 == 1
		size := int(h >> 3)
		typ := h >> 1 & 3
		if typ == 3 {
			return f, ZstdReserved
		}
		if int64(size) > blockMax {
			return f, ZstdBadBlock
		}
		switch typ {
		case 0: // Raw_Block: size bytes follow
			decoded += int64(size)
		case 1: // RLE_Block: one byte follows
			decoded += int64(size)
			size = 1
		}
		if len(b)-p < size {
			return f, ZstdTruncated
		}
		if typ == 2 {
			n, ok := tables.compressedBlock(b[p:p+size], blockMax)
			if !ok {
				return f, ZstdBadBlock
			}
			decoded += n
		}
		if f.contentSize >= 0 && decoded > f.contentSize {
			return f, ZstdBadBlock
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

// blockTables tracks, through a frame, which entropy tables earlier blocks
// defined: treeless literals reuse the last Huffman tree, and a sequence
// table in Repeat_Mode the last table of its kind.
type blockTables struct {
	huffman, ll, of, ml bool
}

// compressedBlock checks the headers of one Compressed_Block's content c
// (RFC 8878 §3.1.1.3): the literals section header, that the literals fit
// the block and regenerate at most blockMax bytes, and the sequences
// section header. It returns the fewest bytes the block decodes to (its
// literals plus 3 per sequence, the shortest match) and false when the
// headers are invalid.
func (t *blockTables) compressedBlock(c []byte, blockMax int64) (int64, bool) {
	if len(c) < 1 {
		return 0, false
	}
	b0 := c[0]
	typ, sf := b0&3, b0>>2&3
	var hdr, regen, comp int
	at := func(i int) int { return int(c[i]) }
	switch typ {
	case 0, 1: // Raw_Literals_Block, RLE_Literals_Block
		switch sf {
		case 0, 2:
			hdr, regen = 1, int(b0>>3)
		case 1:
			if hdr = 2; len(c) < hdr {
				return 0, false
			}
			regen = int(b0>>4) | at(1)<<4
		case 3:
			if hdr = 3; len(c) < hdr {
				return 0, false
			}
			regen = int(b0>>4) | at(1)<<4 | at(2)<<12
		}
		comp = regen
		if typ == 1 {
			comp = 1
		}
	default: // Compressed_Literals_Block, Treeless_Literals_Block
		hdr = [4]int{3, 3, 4, 5}[sf]
		if len(c) < hdr {
			return 0, false
		}
		switch sf {
		case 0, 1:
			regen, comp = int(b0>>4)|(at(1)&0x3F)<<4, at(1)>>6|at(2)<<2
		case 2:
			regen, comp = int(b0>>4)|at(1)<<4|(at(2)&3)<<12, at(2)>>2|at(3)<<6
		case 3:
			regen, comp = int(b0>>4)|at(1)<<4|(at(2)&0x3F)<<12, at(2)>>6|at(3)<<2|at(4)<<10
		}
		if typ == 3 && !t.huffman {
			return 0, false
		}
		// Four streams start with a 6-byte jump table.
		if regen == 0 || comp == 0 || sf != 0 && comp < 10 {
			return 0, false
		}
		t.huffman = true
	}
	if int64(regen) > blockMax || hdr+comp > len(c) {
		return 0, false
	}
	p := hdr + comp
	if p >= len(c) {
		return 0, false // the sequences section header is not optional
	}
	n0 := at(p)
	p++
	var nbSeq int
	switch {
	case n0 == 0:
		return int64(regen), p == len(c)
	case n0 < 128:
		nbSeq = n0
	case n0 < 255:
		if p >= len(c) {
			return 0, false
		}
		nbSeq = (n0-128)<<8 | at(p)
		p++
	default:
		if len(c)-p < 2 {
			return 0, false
		}
		nbSeq = at(p) | at(p+1)<<8 + 0x7F00
		p += 2
	}
	if p >= len(c) {
		return 0, false
	}
	modes := c[p]
	p++
	if modes&3 != 0 { // reserved bits
		return 0, false
	}
	for _, x := range []struct {
		mode    byte
		defined *bool
	}{{modes >> 6, &t.ll}, {modes >> 4 & 3, &t.of}, {modes >> 2 & 3, &t.ml}} {
		if x.mode == 3 && !*x.defined { // Repeat_Mode without a table to repeat
			return 0, false
		}
		*x.defined = true
	}
	least := int64(regen) + 3*int64(nbSeq)
	if least > blockMax || p >= len(c) {
		return 0, false
	}
	return least, true
}
