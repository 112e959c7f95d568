package blosc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// blosclz is c-blosc's LZ77 codec, derived from FastLZ level 1. A stream is
// a sequence of tokens, each starting with a control byte ctrl:
//
//   - ctrl < 32: a literal run; the next ctrl+1 bytes are copied.
//   - ctrl >= 32: a match. Its length is (ctrl>>5)+2; when ctrl>>5 is 7,
//     bytes follow that add to the length, each 255 meaning another follows.
//     Then a byte c gives the distance (ctrl&31)<<8 + c + 1 back from the
//     output position; when ctrl&31 is 31 and c is 255, two more bytes, big
//     endian, give instead a far distance of their value + 8192. The match
//     copies forward byte by byte, so it may overlap its own output.
//
// The first control byte is always a literal run: its top 3 bits are a
// marker and ignored. The stream ends after the last token's bytes.
const (
	blosclzMaxLiteral = 32                      // longest literal run
	blosclzNear       = 8191                    // largest biased distance with a 13-bit code
	blosclzMaxDist    = blosclzNear + 1 + 65535 // largest far distance
)

var errBloscLZ = errors.New("blosclz")

// decodeBloscLZ decodes the blosclz stream src into dst, which the stream
// must fill exactly.
//
// Tokens far enough from the ends of src and dst take a fast path that
// copies in whole words: a literal run as 32 bytes; a match of distance 8
// or more, up to 64 bytes long, in steps of 8 (each step reads bytes the
// ones before wrote, as a byte-by-byte copy would); a match of a shorter
// distance, a repeat of a short pattern, likewise from a multiple of its
// distance back. They write up to 31 bytes past the token's end, which
// later tokens overwrite. c-blosc's streams of shuffled data are mostly
// such short tokens, for which a call to copy costs more than the copy.
func decodeBloscLZ(dst, src []byte) error {
	if len(src) == 0 {
		return fmt.Errorf("%w: empty stream", errBloscLZ)
	}
	ip, op := 1, 0
	ctrl := int(src[0] & 31)
	for {
		if ctrl < 32 {
			n := ctrl + 1
			if len(src)-ip >= 32 && len(dst)-op >= 32 {
				s, d := src[ip:ip+32], dst[op:op+32]
				binary.LittleEndian.PutUint64(d, binary.LittleEndian.Uint64(s))
				binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(s[8:]))
				binary.LittleEndian.PutUint64(d[16:], binary.LittleEndian.Uint64(s[16:]))
				binary.LittleEndian.PutUint64(d[24:], binary.LittleEndian.Uint64(s[24:]))
			} else {
				if n > len(src)-ip {
					return fmt.Errorf("%w: literal run of %d at input %d overruns the stream", errBloscLZ, n, ip)
				}
				if n > len(dst)-op {
					return fmt.Errorf("%w: literal run of %d at output %d overruns %d bytes", errBloscLZ, n, op, len(dst))
				}
				copy(dst[op:], src[ip:ip+n])
			}
			ip += n
			op += n
		} else {
			length := ctrl>>5 + 2
			if length == 9 {
				for {
					if ip >= len(src) {
						return fmt.Errorf("%w: match length runs past the stream", errBloscLZ)
					}
					c := src[ip]
					ip++
					length += int(c)
					if c != 255 {
						break
					}
				}
			}
			if ip >= len(src) {
				return fmt.Errorf("%w: match distance runs past the stream", errBloscLZ)
			}
			c := int(src[ip])
			ip++
			dist := (ctrl&31)<<8 + c + 1
			if dist == blosclzNear+1 {
				if len(src)-ip < 2 {
					return fmt.Errorf("%w: far match distance runs past the stream", errBloscLZ)
				}
				dist = int(src[ip])<<8 | int(src[ip+1]) + blosclzNear + 1
				ip += 2
			}
			if dist > op {
				return fmt.Errorf("%w: match distance %d at output %d reaches before the start", errBloscLZ, dist, op)
			}
			if length > len(dst)-op {
				return fmt.Errorf("%w: match of %d at output %d overruns %d bytes", errBloscLZ, length, op, len(dst))
			}
			switch from := op - dist; {
			case len(dst)-op < length+16 || (dist >= 8 && length > 64):
				copyMatch(dst, op, dist, length)
			case dist >= 8:
				for i := 0; i < length; i += 8 {
					binary.LittleEndian.PutUint64(dst[op+i:], binary.LittleEndian.Uint64(dst[from+i:]))
				}
			default:
				// A repeat of a short pattern: its first 16 bytes one by
				// one, then words from step bytes back, step the
				// smallest multiple of dist of at least 8 (the pattern
				// repeats every step bytes, and a word read there was
				// written before).
				d := dst[from : op+16]
				for i := range 16 {
					d[dist+i] = d[i]
				}
				step := (8 + dist - 1) / dist * dist
				for i := step; i < length; i += 8 {
					binary.LittleEndian.PutUint64(dst[op+i:], binary.LittleEndian.Uint64(dst[op+i-step:]))
				}
			}
			op += length
		}
		if ip >= len(src) {
			break
		}
		ctrl = int(src[ip])
		ip++
	}
	if op != len(dst) {
		return fmt.Errorf("%w: decoded %d bytes, want %d", errBloscLZ, op, len(dst))
	}
	return nil
}

// copyMatch copies length bytes to dst[op:] from dist bytes back, as a
// forward byte-by-byte copy would when the ranges overlap.
func copyMatch(dst []byte, op, dist, length int) {
	from := op - dist
	if dist >= length {
		copy(dst[op:op+length], dst[from:])
		return
	}
	// Each pass copies the whole pattern written so far, a multiple of
	// dist bytes, so the period is kept and the copy length doubles.
	for n := 0; n < length; {
		n += copy(dst[op+n:op+length], dst[from:op+n])
	}
}

// blosclzTableBits sizes the encoder's hash table of recent positions.
const blosclzTableBits = 14

// encodeBloscLZ compresses src into dst with a greedy hash-chain-free LZ77
// search for matches of at least 5 bytes, and returns the compressed
// length, or 0 if the output would not be shorter than len(dst). table is
// scratch.
func encodeBloscLZ(dst, src []byte, table *[1 << blosclzTableBits]int32) int {
	clear(table[:])
	// Matches stop short of the last byte, so the stream ends with a
	// literal run: c-blosc 1.21's decoder rejects a stream ending in a match.
	limit := len(src) - 1
	op, lit := 0, 0
	for i := 0; i+4 <= limit; {
		v := binary.LittleEndian.Uint32(src[i:])
		h := (v * 2654435761) >> (32 - blosclzTableBits)
		cand := int(table[h]) - 1
		table[h] = int32(i + 1)
		dist := i - cand
		if cand < 0 || dist > blosclzMaxDist || binary.LittleEndian.Uint32(src[cand:]) != v {
			i++
			continue
		}
		length := 4
		for i+length < limit && src[cand+length] == src[i+length] {
			length++
		}
		if length < 5 {
			// A far match this short saves nothing, a near one little,
			// and taking it loses longer ones in the literals after
			// it: on bit-shuffled data (the zarr benchmark's 32^3
			// chunks) streams come out a quarter shorter, about as
			// short as c-blosc's at level 9.
			i++
			continue
		}
		if op = emitLiterals(dst, op, src[lit:i]); op < 0 {
			return 0
		}
		if op = emitMatch(dst, op, length, dist); op < 0 {
			return 0
		}
		i += length
		lit = i
	}
	if op = emitLiterals(dst, op, src[lit:]); op < 0 || op >= len(dst) {
		return 0
	}
	dst[0] |= 1 << 5 // c-blosc's marker; decoders ignore it
	return op
}

// emitLiterals writes lits as literal runs at dst[op:] and returns the new
// offset, or -1 when dst is too short.
func emitLiterals(dst []byte, op int, lits []byte) int {
	for len(lits) > 0 {
		n := min(len(lits), blosclzMaxLiteral)
		if n+1 > len(dst)-op {
			return -1
		}
		dst[op] = byte(n - 1)
		copy(dst[op+1:], lits[:n])
		op += n + 1
		lits = lits[n:]
	}
	return op
}

// emitMatch writes a match token at dst[op:] and returns the new offset, or
// -1 when dst is too short.
func emitMatch(dst []byte, op, length, dist int) int {
	need := 2 + 2 + (length-9)/255 + 1 // worst case: far, with length bytes
	if need > len(dst)-op {
		return -1
	}
	code := min(length-2, 7)
	d := dist - 1
	hi := 31
	if d < blosclzNear {
		hi = d >> 8
	}
	dst[op] = byte(code<<5 | hi)
	op++
	if code == 7 {
		rem := length - 9
		for ; rem >= 255; rem -= 255 {
			dst[op] = 255
			op++
		}
		dst[op] = byte(rem)
		op++
	}
	if d < blosclzNear {
		dst[op] = byte(d)
		return op + 1
	}
	far := dist - blosclzNear - 1
	dst[op], dst[op+1], dst[op+2] = 255, byte(far>>8), byte(far)
	return op + 3
}
