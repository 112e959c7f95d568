package blosc

import "encoding/binary"

// The bit unshuffle this package had before bitUnshuffleBlock took two
// passes (kept as the reference the new one is checked against, bit for
// bit): 64 elements at a time, each byte of them transposed out of its
// eight bit-rows and zipped into place.

// transposeBitLanesRef transposes, in each of the 8 byte lanes at once, the
// 8x8 bit matrix whose row k is that lane's byte of r[k]: bit j of lane g
// of r[k] moves to bit k of lane g of r[j]. It swaps the off-diagonal
// quadrants, then the off-diagonal 2x2 blocks, then single bits.
func transposeBitLanesRef(r *[8]uint64) {
	for k := range 4 {
		t := (r[k]>>4 ^ r[k+4]) & 0x0f0f0f0f0f0f0f0f
		r[k+4] ^= t
		r[k] ^= t << 4
	}
	for _, k := range [4]int{0, 1, 4, 5} {
		t := (r[k]>>2 ^ r[k+2]) & 0x3333333333333333
		r[k+2] ^= t
		r[k] ^= t << 2
	}
	for k := 0; k < 8; k += 2 {
		t := (r[k]>>1 ^ r[k+1]) & 0x5555555555555555
		r[k+1] ^= t
		r[k] ^= t << 1
	}
}

// bitUnshuffleRef bit-unshuffles one block; len(dst) == len(src).
//
// It works on 64 elements at a time: for each byte b, 8 words from the 8
// bit-rows of b transpose (as bits within each byte lane, then as bytes)
// into byte b of the 64 elements, which the byte-unshuffle zips then
// interleave into place.
func bitUnshuffleRef(dst, src []byte, ts int) {
	n := len(src) / ts
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	rl := n / 8 // bytes per bit-row
	g := 0      // bit-row byte, = element / 8
	for ; g+8 <= rl; g += 8 {
		var y [8][8]uint64 // y[b][i]: byte b of elements 8(g+i) .. 8(g+i)+7
		for b := range ts {
			var r [8]uint64
			rows := src[8*b*rl+g:]
			for k := range r {
				r[k] = binary.LittleEndian.Uint64(rows[k*rl:])
			}
			transposeBitLanesRef(&r)
			transposeBytes8(&r)
			if b < len(y) {
				y[b] = r
				continue
			}
			for i, x := range r {
				d := dst[8*(g+i)*ts+b:]
				for j := range 8 {
					d[j*ts] = byte(x >> (8 * j))
				}
			}
		}
		d := dst[8*g*ts : 8*(g+8)*ts]
		switch ts {
		case 1:
			for i, x := range y[0] {
				binary.LittleEndian.PutUint64(d[8*i:], x)
			}
		case 2:
			for i := range 8 {
				lo, hi := zip8lo(y[0][i], y[1][i]), zip8hi(y[0][i], y[1][i])
				binary.LittleEndian.PutUint64(d[16*i:], lo)
				binary.LittleEndian.PutUint64(d[16*i+8:], hi)
			}
		case 4:
			for i := range 8 {
				a0, a1 := zip8lo(y[0][i], y[1][i]), zip8hi(y[0][i], y[1][i])
				b0, b1 := zip8lo(y[2][i], y[3][i]), zip8hi(y[2][i], y[3][i])
				w0, w1 := zip16(a0, b0)
				w2, w3 := zip16(a1, b1)
				binary.LittleEndian.PutUint64(d[32*i:], w0)
				binary.LittleEndian.PutUint64(d[32*i+8:], w1)
				binary.LittleEndian.PutUint64(d[32*i+16:], w2)
				binary.LittleEndian.PutUint64(d[32*i+24:], w3)
			}
		case 8:
			for i := range 8 {
				r := [8]uint64{y[0][i], y[1][i], y[2][i], y[3][i], y[4][i], y[5][i], y[6][i], y[7][i]}
				transposeBytes8(&r)
				for e, x := range r {
					binary.LittleEndian.PutUint64(d[64*i+8*e:], x)
				}
			}
		default:
			for b := range min(ts, len(y)) {
				for i, x := range y[b] {
					dd := d[8*i*ts+b:]
					for j := range 8 {
						dd[j*ts] = byte(x >> (8 * j))
					}
				}
			}
		}
	}
	for ; g < rl; g++ {
		for b := range ts {
			rows := src[8*b*rl:]
			var x uint64
			for k := range 8 {
				x |= uint64(rows[k*rl+g]) << (8 * k)
			}
			x = transposeBits8(x)
			d := dst[8*g*ts+b:]
			for j := range 8 {
				d[j*ts] = byte(x >> (8 * j))
			}
		}
	}
	copy(dst[n*ts:len(src)], src[n*ts:])
}
