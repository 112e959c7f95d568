package blosc

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Unshuffle undoes blosc's byte shuffle on a decoded chunk: src holds nbytes
// bytes in blocks of blocksize (the last one may be shorter), each block
// byte-shuffled with elements of typesize bytes, and dst receives the
// unshuffled bytes. In a block of bs bytes with n = bs/typesize elements,
// shuffled byte j*n+i is byte j of element i; the last bs%typesize bytes
// are not shuffled. dst and src must not overlap.
func Unshuffle(dst, src []byte, typesize, blocksize, nbytes int) error {
	if err := checkShuffleArgs(dst, src, typesize, blocksize, nbytes); err != nil {
		return err
	}
	for start := 0; start < nbytes; start += blocksize {
		end := min(start+blocksize, nbytes)
		unshuffleBlock(dst[start:end], src[start:end], typesize)
	}
	return nil
}

// BitUnshuffle undoes blosc's bit shuffle on a decoded chunk laid out as for
// Unshuffle. A block of n = bs/typesize elements, n a multiple of 8, holds
// 8*typesize rows of n/8 bytes; row 8*b+k holds bit k of byte b of every
// element, element i at bit i%8 of byte i/8. The last bs%typesize bytes are
// not shuffled, and a block whose n is not a multiple of 8 is not shuffled
// at all. dst and src must not overlap.
func BitUnshuffle(dst, src []byte, typesize, blocksize, nbytes int) error {
	if err := checkShuffleArgs(dst, src, typesize, blocksize, nbytes); err != nil {
		return err
	}
	for start := 0; start < nbytes; start += blocksize {
		end := min(start+blocksize, nbytes)
		bitUnshuffleBlock(dst[start:end], src[start:end], typesize)
	}
	return nil
}

func checkShuffleArgs(dst, src []byte, typesize, blocksize, nbytes int) error {
	switch {
	case typesize < 1 || typesize > MaxTypesize:
		return fmt.Errorf("blosc: typesize %d outside 1..%d", typesize, MaxTypesize)
	case blocksize < 1:
		return fmt.Errorf("blosc: blocksize %d < 1", blocksize)
	case nbytes < 0:
		return fmt.Errorf("blosc: nbytes %d < 0", nbytes)
	case len(src) < nbytes:
		return fmt.Errorf("blosc: source holds %d bytes, want %d: %w", len(src), nbytes, io.ErrShortBuffer)
	case len(dst) < nbytes:
		return fmt.Errorf("blosc: destination holds %d bytes, want %d: %w", len(dst), nbytes, io.ErrShortBuffer)
	}
	return nil
}

// unshuffleBlock byte-unshuffles one block; len(dst) == len(src).
func unshuffleBlock(dst, src []byte, ts int) {
	n := len(src) / ts
	switch ts {
	case 1:
		copy(dst, src)
		return
	case 2:
		unshuffle2(dst, src, n)
	case 4:
		unshuffle4(dst, src, n)
	case 8:
		unshuffle8(dst, src, n)
	default:
		unshuffleAny(dst, src, n, ts, 0)
	}
	copy(dst[n*ts:len(src)], src[n*ts:])
}

// unshuffleAny unshuffles elements from..n-1 of a block of n elements.
func unshuffleAny(dst, src []byte, n, ts, from int) {
	for j := range ts {
		plane := src[j*n : (j+1)*n]
		for i := from; i < n; i++ {
			dst[i*ts+j] = plane[i]
		}
	}
}

// spread8 moves byte k of x to byte 2k of the result.
func spread8(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

// spread16 moves 16-bit lane k of x to 32-bit lane k of the result.
func spread16(x uint32) uint64 {
	v := uint64(x)
	return (v | v<<16) & 0x0000ffff0000ffff
}

// zip8 interleaves the bytes of a and b: the result's 16-bit lane k is
// a's byte k, then b's byte k, for k = 0..7, as two words.
func zip8(a, b uint64) (lo, hi uint64) {
	lo = spread8(uint32(a)) | spread8(uint32(b))<<8
	hi = spread8(uint32(a>>32)) | spread8(uint32(b>>32))<<8
	return lo, hi
}

// zip16 interleaves the 16-bit lanes of a and b into 32-bit lanes.
func zip16(a, b uint64) (lo, hi uint64) {
	lo = spread16(uint32(a)) | spread16(uint32(b))<<16
	hi = spread16(uint32(a>>32)) | spread16(uint32(b>>32))<<16
	return lo, hi
}

// zip32 interleaves the 32-bit lanes of a and b into 64-bit lanes.
func zip32(a, b uint64) (lo, hi uint64) {
	return a&0xffffffff | b<<32, a>>32 | b&^0xffffffff
}

func unshuffle2(dst, src []byte, n int) {
	p0, p1 := src[:n], src[n:2*n]
	i := 0
	for ; i+8 <= n; i += 8 {
		lo, hi := zip8(binary.LittleEndian.Uint64(p0[i:]), binary.LittleEndian.Uint64(p1[i:]))
		d := dst[2*i : 2*i+16]
		binary.LittleEndian.PutUint64(d, lo)
		binary.LittleEndian.PutUint64(d[8:], hi)
	}
	unshuffleAny(dst, src, n, 2, i)
}

func unshuffle4(dst, src []byte, n int) {
	p0, p1, p2, p3 := src[:n], src[n:2*n], src[2*n:3*n], src[3*n:4*n]
	i := 0
	for ; i+8 <= n; i += 8 {
		a0, a1 := zip8(binary.LittleEndian.Uint64(p0[i:]), binary.LittleEndian.Uint64(p1[i:]))
		b0, b1 := zip8(binary.LittleEndian.Uint64(p2[i:]), binary.LittleEndian.Uint64(p3[i:]))
		w0, w1 := zip16(a0, b0)
		w2, w3 := zip16(a1, b1)
		d := dst[4*i : 4*i+32]
		binary.LittleEndian.PutUint64(d, w0)
		binary.LittleEndian.PutUint64(d[8:], w1)
		binary.LittleEndian.PutUint64(d[16:], w2)
		binary.LittleEndian.PutUint64(d[24:], w3)
	}
	unshuffleAny(dst, src, n, 4, i)
}

func unshuffle8(dst, src []byte, n int) {
	var p [8][]byte
	for j := range p {
		p[j] = src[j*n : (j+1)*n]
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		var w [8]uint64
		transpose8x8(&w, p[0][i:], p[1][i:], p[2][i:], p[3][i:], p[4][i:], p[5][i:], p[6][i:], p[7][i:])
		d := dst[8*i : 8*i+64]
		for k, x := range w {
			binary.LittleEndian.PutUint64(d[8*k:], x)
		}
	}
	unshuffleAny(dst, src, n, 8, i)
}

// transpose8x8 loads 8 bytes from each of r0..r7 and sets w[i] to the word
// whose byte k is byte i of rk.
func transpose8x8(w *[8]uint64, r0, r1, r2, r3, r4, r5, r6, r7 []byte) {
	a0, a1 := zip8(binary.LittleEndian.Uint64(r0), binary.LittleEndian.Uint64(r1))
	b0, b1 := zip8(binary.LittleEndian.Uint64(r2), binary.LittleEndian.Uint64(r3))
	c0, c1 := zip8(binary.LittleEndian.Uint64(r4), binary.LittleEndian.Uint64(r5))
	d0, d1 := zip8(binary.LittleEndian.Uint64(r6), binary.LittleEndian.Uint64(r7))
	// 16-bit lane i of a0/a1 is bytes i of r0, r1; gather 32-bit lanes.
	e0, e1 := zip16(a0, b0) // elements 0..3, bytes 0..3
	e2, e3 := zip16(a1, b1) // elements 4..7, bytes 0..3
	f0, f1 := zip16(c0, d0) // elements 0..3, bytes 4..7
	f2, f3 := zip16(c1, d1) // elements 4..7, bytes 4..7
	w[0], w[1] = zip32(e0, f0)
	w[2], w[3] = zip32(e1, f1)
	w[4], w[5] = zip32(e2, f2)
	w[6], w[7] = zip32(e3, f3)
}

// shuffleBlock byte-shuffles one block; len(dst) == len(src).
func shuffleBlock(dst, src []byte, ts int) {
	n := len(src) / ts
	for j := range ts {
		plane := dst[j*n : (j+1)*n]
		for i := range plane {
			plane[i] = src[i*ts+j]
		}
	}
	copy(dst[n*ts:len(src)], src[n*ts:])
}

// transposeBits8 transposes the 8x8 bit matrix whose row k is byte k of x
// and whose column j is bit j: bit 8k+j moves to bit 8j+k.
func transposeBits8(x uint64) uint64 {
	t := (x ^ x>>7) & 0x00aa00aa00aa00aa
	x ^= t ^ t<<7
	t = (x ^ x>>14) & 0x0000cccc0000cccc
	x ^= t ^ t<<14
	t = (x ^ x>>28) & 0x00000000f0f0f0f0
	return x ^ t ^ t<<28
}

// bitUnshuffleBlock bit-unshuffles one block; len(dst) == len(src).
func bitUnshuffleBlock(dst, src []byte, ts int) {
	n := len(src) / ts
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	rl := n / 8 // bytes per bit-row
	for b := range ts {
		rows := src[8*b*rl : 8*(b+1)*rl]
		g := 0
		if ts == 1 {
			for ; g+8 <= rl; g += 8 {
				var w [8]uint64
				transpose8x8(&w, rows[g:], rows[rl+g:], rows[2*rl+g:], rows[3*rl+g:], rows[4*rl+g:], rows[5*rl+g:], rows[6*rl+g:], rows[7*rl+g:])
				d := dst[8*g : 8*g+64]
				for k, x := range w {
					binary.LittleEndian.PutUint64(d[8*k:], transposeBits8(x))
				}
			}
		}
		for ; g < rl; g++ {
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

// bitShuffleBlock bit-shuffles one block; len(dst) == len(src).
func bitShuffleBlock(dst, src []byte, ts int) {
	n := len(src) / ts
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	rl := n / 8
	for b := range ts {
		rows := dst[8*b*rl : 8*(b+1)*rl]
		for g := range rl {
			var y uint64
			s := src[8*g*ts+b:]
			for j := range 8 {
				y |= uint64(s[j*ts]) << (8 * j)
			}
			x := transposeBits8(y)
			for k := range 8 {
				rows[k*rl+g] = byte(x >> (8 * k))
			}
		}
	}
	copy(dst[n*ts:len(src)], src[n*ts:])
}
