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
	scratch := make([]byte, min(blocksize, nbytes))
	for start := 0; start < nbytes; start += blocksize {
		end := min(start+blocksize, nbytes)
		bitUnshuffleBlock(dst[start:end], src[start:end], scratch, typesize)
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
	from := unshuffleSIMD(dst, src, n, ts)
	switch ts {
	case 1:
		copy(dst, src)
		return
	case 2:
		unshuffle2(dst, src, n, from)
	case 4:
		unshuffle4(dst, src, n, from)
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

// interleave8 turns bytes a0..a3 b0..b3 of x (low byte first) into
// a0 b0 a1 b1 a2 b2 a3 b3, by two swaps of the middle groups.
func interleave8(x uint64) uint64 {
	t := (x ^ x>>16) & 0x00000000ffff0000
	x ^= t | t<<16
	t = (x ^ x>>8) & 0x0000ff000000ff00
	return x ^ (t | t<<8)
}

// interleave16 turns 16-bit lanes a0 a1 b0 b1 of x into a0 b0 a1 b1.
func interleave16(x uint64) uint64 {
	t := (x ^ x>>16) & 0x00000000ffff0000
	return x ^ (t | t<<16)
}

// zip8lo and zip8hi interleave the bytes of a and b: 16-bit lane k of the
// result is a's byte k, then b's, for k = 0..3 (lo) and 4..7 (hi). They
// are two functions so that each stays cheap enough to inline.
func zip8lo(a, b uint64) uint64 { return interleave8(a&0xffffffff | b<<32) }
func zip8hi(a, b uint64) uint64 { return interleave8(a>>32 | b&^0xffffffff) }

// zip16 interleaves the 16-bit lanes of a and b into 32-bit lanes.
func zip16(a, b uint64) (lo, hi uint64) {
	return interleave16(a&0xffffffff | b<<32), interleave16(a>>32 | b&^0xffffffff)
}

// unshuffle2 unshuffles elements from..n-1 of a block of n elements of 2
// bytes, eight at a time while eight remain.
func unshuffle2(dst, src []byte, n, from int) {
	p0, p1 := src[:n], src[n:2*n]
	i := from
	for ; i+8 <= n; i += 8 {
		a := binary.LittleEndian.Uint64(p0[i : i+8])
		b := binary.LittleEndian.Uint64(p1[i : i+8])
		d := dst[2*i : 2*i+16]
		binary.LittleEndian.PutUint64(d[:8], zip8lo(a, b))
		binary.LittleEndian.PutUint64(d[8:], zip8hi(a, b))
	}
	unshuffleAny(dst, src, n, 2, i)
}

// unshuffle4 unshuffles elements from..n-1 of a block of n elements of 4
// bytes, as unshuffle2.
func unshuffle4(dst, src []byte, n, from int) {
	p0, p1, p2, p3 := src[:n], src[n:2*n], src[2*n:3*n], src[3*n:4*n]
	i := from
	for ; i+8 <= n; i += 8 {
		r0 := binary.LittleEndian.Uint64(p0[i : i+8])
		r1 := binary.LittleEndian.Uint64(p1[i : i+8])
		r2 := binary.LittleEndian.Uint64(p2[i : i+8])
		r3 := binary.LittleEndian.Uint64(p3[i : i+8])
		a0, a1 := zip8lo(r0, r1), zip8hi(r0, r1)
		b0, b1 := zip8lo(r2, r3), zip8hi(r2, r3)
		w0, w1 := zip16(a0, b0)
		w2, w3 := zip16(a1, b1)
		d := dst[4*i : 4*i+32]
		binary.LittleEndian.PutUint64(d[:8], w0)
		binary.LittleEndian.PutUint64(d[8:16], w1)
		binary.LittleEndian.PutUint64(d[16:24], w2)
		binary.LittleEndian.PutUint64(d[24:], w3)
	}
	unshuffleAny(dst, src, n, 4, i)
}

func unshuffle8(dst, src []byte, n int) {
	i := 0
	for ; i+8 <= n; i += 8 {
		var r [8]uint64
		for k := range r {
			r[k] = binary.LittleEndian.Uint64(src[k*n+i:])
		}
		transposeBytes8(&r)
		d := dst[8*i : 8*i+64]
		for k, x := range r {
			binary.LittleEndian.PutUint64(d[8*k:], x)
		}
	}
	unshuffleAny(dst, src, n, 8, i)
}

// transposeBytes8 transposes the 8x8 byte matrix whose row k is r[k]
// (byte i its column i): afterwards byte k of r[i] is what byte i of r[k]
// was. Like transposeBitLanes, it swaps off-diagonal blocks of halving size.
func transposeBytes8(r *[8]uint64) {
	for k := range 4 {
		t := (r[k]>>32 ^ r[k+4]) & 0x00000000ffffffff
		r[k+4] ^= t
		r[k] ^= t << 32
	}
	for _, k := range [4]int{0, 1, 4, 5} {
		t := (r[k]>>16 ^ r[k+2]) & 0x0000ffff0000ffff
		r[k+2] ^= t
		r[k] ^= t << 16
	}
	for k := 0; k < 8; k += 2 {
		t := (r[k]>>8 ^ r[k+1]) & 0x00ff00ff00ff00ff
		r[k+1] ^= t
		r[k] ^= t << 8
	}
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
