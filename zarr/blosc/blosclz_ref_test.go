package blosc

import "fmt"

// The blosclz decoder this package had before decodeBloscLZ took its fast
// path (kept as the reference the new one is checked against, bit for
// bit): every token bounds-checked and copied with copy.

// decodeBloscLZRef decodes the blosclz stream src into dst, which the stream
// must fill exactly.
func decodeBloscLZRef(dst, src []byte) error {
	if len(src) == 0 {
		return fmt.Errorf("%w: empty stream", errBloscLZ)
	}
	ip, op := 1, 0
	ctrl := int(src[0] & 31)
	for {
		if ctrl < 32 {
			n := ctrl + 1
			if n > len(src)-ip {
				return fmt.Errorf("%w: literal run of %d at input %d overruns the stream", errBloscLZ, n, ip)
			}
			if n > len(dst)-op {
				return fmt.Errorf("%w: literal run of %d at output %d overruns %d bytes", errBloscLZ, n, op, len(dst))
			}
			copy(dst[op:], src[ip:ip+n])
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
			copyMatchRef(dst, op, dist, length)
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

// copyMatchRef copies length bytes to dst[op:] from dist bytes back, as a
// forward byte-by-byte copy would when the ranges overlap.
func copyMatchRef(dst []byte, op, dist, length int) {
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

// formerDecode decodes a blosc chunk as the package did before its faster
// blosclz and bit unshuffle: blosclz streams with decodeBloscLZRef, other
// streams with the shared Decoder, bit-shuffled blocks with
// bitUnshuffleRef.
func formerDecode(frame []byte) ([]byte, error) {
	f, err := Parse(frame)
	if err != nil {
		return nil, err
	}
	h := f.Header
	d, err := shared()
	if err != nil {
		return nil, err
	}
	shuffled := make([]byte, h.Nbytes)
	for _, s := range f.Streams {
		out, in := shuffled[s.Dst:s.Dst+s.Size], frame[s.Src:s.Src+s.CSize]
		if h.Compressor() == BloscLZ && !s.Raw {
			err = decodeBloscLZRef(out, in)
		} else {
			err = d.stream(out, in, h, s)
		}
		if err != nil {
			return nil, err
		}
	}
	out := make([]byte, h.Nbytes)
	for start := 0; start < h.Nbytes; start += h.Blocksize {
		end := min(start+h.Blocksize, h.Nbytes)
		switch h.Shuffle() {
		case ByteShuffle:
			unshuffleBlock(out[start:end], shuffled[start:end], h.Typesize)
		case BitShuffle:
			bitUnshuffleRef(out[start:end], shuffled[start:end], h.Typesize)
		default:
			copy(out[start:end], shuffled[start:end])
		}
	}
	return out, nil
}
