package nvcomp

import "errors"

// Errors of LZ4GPUCheck, one per way a block can fail the walk.
var (
	errLZ4Truncated = errors.New("nvcomp: lz4 block ends inside a sequence")
	errLZ4Offset    = errors.New("nvcomp: lz4 match offset is zero or reaches before the output")
	errLZ4Size      = errors.New("nvcomp: lz4 block does not decode to the expected size")
	errLZ4End       = errors.New("nvcomp: lz4 block breaks the end-of-block rules (last 5 bytes literals, last match 12 bytes before the end)")
	errLZ4Empty     = errors.New("nvcomp: lz4 block with an expected size of zero")
)

// LZ4GPUCheck walks the sequences of a raw LZ4 block without decoding it
// and returns nil if nvCOMP may decode it: the block must decode to exactly
// want bytes, end with a literals-only sequence exactly at its last byte,
// reference no byte before the start of the output, and keep the format's
// end-of-block rules (the last 5 bytes are literals and the last match
// starts at least 12 bytes before the end), which standard encoders
// (liblz4, pierrec/lz4, blosc, numcodecs) always keep.
//
// This check is what keeps nvCOMP's LZ4 decoder from producing wrong data.
// Measured with nvCOMP 5.3 and 6.0: it bounds its writes by neither the
// output capacity nor, for damaged blocks, the compressed size. A block
// that decodes to more than the capacity is written past the end of its
// output buffer (into its neighbours' outputs) with a success status, and
// a truncated block decodes "successfully" to the full capacity from the
// bytes that follow it in memory. A block that passes this walk decodes to
// exactly want bytes with every reference inside its own output, so nvCOMP
// and the CPU decoder give the same bytes.
//
// The walk costs a few nanoseconds per sequence, not per byte: it skips
// literals and matches, reading only tokens, length bytes and offsets.
func LZ4GPUCheck(block []byte, want int) error {
	if want <= 0 {
		return errLZ4Empty
	}
	p, out := 0, 0
	for {
		if p >= len(block) {
			return errLZ4Truncated
		}
		token := block[p]
		p++
		lit := int(token >> 4)
		if lit == 15 {
			for {
				if p >= len(block) {
					return errLZ4Truncated
				}
				x := block[p]
				p++
				lit += int(x)
				if x != 255 {
					break
				}
			}
		}
		if lit > len(block)-p || lit > want-out {
			if lit > len(block)-p {
				return errLZ4Truncated
			}
			return errLZ4Size
		}
		p += lit
		out += lit
		if p == len(block) {
			// The last sequence: literals only, ending the block and the
			// output together.
			if out != want {
				return errLZ4Size
			}
			if token&15 != 0 {
				return errLZ4End
			}
			return nil
		}
		if len(block)-p < 2 {
			return errLZ4Truncated
		}
		offset := int(block[p]) | int(block[p+1])<<8
		p += 2
		if offset == 0 || offset > out {
			return errLZ4Offset
		}
		match := int(token&15) + 4
		if token&15 == 15 {
			for {
				if p >= len(block) {
					return errLZ4Truncated
				}
				x := block[p]
				p++
				match += int(x)
				if x != 255 {
					break
				}
			}
		}
		if out > want-12 {
			return errLZ4End
		}
		if match > want-5-out {
			if match > want-out {
				return errLZ4Size
			}
			return errLZ4End
		}
		out += match
	}
}
