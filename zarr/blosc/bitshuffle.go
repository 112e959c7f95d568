package blosc

import "encoding/binary"

// Bit unshuffle in two passes: bitToBytePlanes turns a bit-shuffled block
// into the byte-shuffled layout (plane b holds byte b of every element, in
// element order), then unshuffleBlock interleaves the planes. The first
// pass needs no knowledge of the typesize beyond the number of planes, so
// one kernel serves every typesize, and each pass streams through memory:
// on a 2-core AMD EPYC this is 3 times as fast as transposing and zipping
// each group of 64 elements in one pass (cmd/damacy/BENCH.md, "CPU
// decoders").

// bitUnshuffleBlock bit-unshuffles one block, src into dst, through
// scratch; all three hold at least len(src) bytes. scratch overlaps
// neither; dst may be src itself (the first pass reads all of src before
// the second writes dst), else it must not overlap src.
func bitUnshuffleBlock(dst, src, scratch []byte, ts int) {
	n := len(src) / ts
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	tail := src[n*ts:]
	if len(tail) > 0 {
		// The trailing bytes are not shuffled; take them before dst may
		// overwrite them (dst == src).
		copy(scratch[n*ts:len(src)], tail)
	}
	bitToBytePlanes(scratch[:n*ts], src[:n*ts], ts)
	unshuffleBlock(dst[:len(src)], scratch[:len(src)], ts)
}

// bitToBytePlanes turns the bit-shuffled elements src (n = len(src)/ts
// elements, n a multiple of 8) into byte planes in dst: dst[b*n+i] is byte b
// of element i. Eight row bytes (64 elements) of a plane at a time are
// transposed as bits within bytes, then as bytes; on amd64 with AVX2, 32 row
// bytes at a time (bitToBytePlanesSIMD).
func bitToBytePlanes(dst, src []byte, ts int) {
	n := len(src) / ts
	rl := n / 8 // bytes per bit-row
	done := bitToBytePlanesSIMD(dst, src, ts, rl)
	for b := range ts {
		rows := src[8*b*rl : 8*(b+1)*rl]
		plane := dst[b*n : (b+1)*n]
		g := done
		for ; g+8 <= rl; g += 8 {
			r := rows[g : g+7*rl+8]
			w0, w1, w2, w3, w4, w5, w6, w7 := transposeRows(
				binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint64(r[rl:]),
				binary.LittleEndian.Uint64(r[2*rl:]), binary.LittleEndian.Uint64(r[3*rl:]),
				binary.LittleEndian.Uint64(r[4*rl:]), binary.LittleEndian.Uint64(r[5*rl:]),
				binary.LittleEndian.Uint64(r[6*rl:]), binary.LittleEndian.Uint64(r[7*rl:]))
			d := plane[8*g : 8*g+64]
			binary.LittleEndian.PutUint64(d, w0)
			binary.LittleEndian.PutUint64(d[8:], w1)
			binary.LittleEndian.PutUint64(d[16:], w2)
			binary.LittleEndian.PutUint64(d[24:], w3)
			binary.LittleEndian.PutUint64(d[32:], w4)
			binary.LittleEndian.PutUint64(d[40:], w5)
			binary.LittleEndian.PutUint64(d[48:], w6)
			binary.LittleEndian.PutUint64(d[56:], w7)
		}
		for ; g < rl; g++ {
			var x uint64
			for k := range 8 {
				x |= uint64(rows[k*rl+g]) << (8 * k)
			}
			binary.LittleEndian.PutUint64(plane[8*g:], transposeBits8(x))
		}
	}
}

// transposeRows takes eight words, word k holding bits k of 64 elements'
// bytes (element 8j+m at bit m of byte j), and returns eight words, word j
// holding the bytes of elements 8j..8j+7. It transposes, in each byte lane
// at once, the 8x8 bit matrix whose row k is the lane's byte of word k
// (swapping off-diagonal quadrants, then 2x2 blocks, then bits), and then
// the 8x8 byte matrix of the words (the same, with bytes). Its words stay
// in registers, where an array would not.
func transposeRows(r0, r1, r2, r3, r4, r5, r6, r7 uint64) (w0, w1, w2, w3, w4, w5, w6, w7 uint64) {
	const m4, m2, m1 = 0x0f0f0f0f0f0f0f0f, 0x3333333333333333, 0x5555555555555555
	r0, r4 = swapBits(r0, r4, 4, m4)
	r1, r5 = swapBits(r1, r5, 4, m4)
	r2, r6 = swapBits(r2, r6, 4, m4)
	r3, r7 = swapBits(r3, r7, 4, m4)
	r0, r2 = swapBits(r0, r2, 2, m2)
	r1, r3 = swapBits(r1, r3, 2, m2)
	r4, r6 = swapBits(r4, r6, 2, m2)
	r5, r7 = swapBits(r5, r7, 2, m2)
	r0, r1 = swapBits(r0, r1, 1, m1)
	r2, r3 = swapBits(r2, r3, 1, m1)
	r4, r5 = swapBits(r4, r5, 1, m1)
	r6, r7 = swapBits(r6, r7, 1, m1)
	const b4, b2, b1 = 0x00000000ffffffff, 0x0000ffff0000ffff, 0x00ff00ff00ff00ff
	r0, r4 = swapBits(r0, r4, 32, b4)
	r1, r5 = swapBits(r1, r5, 32, b4)
	r2, r6 = swapBits(r2, r6, 32, b4)
	r3, r7 = swapBits(r3, r7, 32, b4)
	r0, r2 = swapBits(r0, r2, 16, b2)
	r1, r3 = swapBits(r1, r3, 16, b2)
	r4, r6 = swapBits(r4, r6, 16, b2)
	r5, r7 = swapBits(r5, r7, 16, b2)
	r0, r1 = swapBits(r0, r1, 8, b1)
	r2, r3 = swapBits(r2, r3, 8, b1)
	r4, r5 = swapBits(r4, r5, 8, b1)
	r6, r7 = swapBits(r6, r7, 8, b1)
	return r0, r1, r2, r3, r4, r5, r6, r7
}

// swapBits exchanges the bits of a selected by mask<<s with the bits of b
// selected by mask.
func swapBits(a, b uint64, s uint, mask uint64) (uint64, uint64) {
	t := (a>>s ^ b) & mask
	return a ^ t<<s, b ^ t
}
