package sampler

import "math/bits"

// The generator is counter-based: draw g of epoch e reads a stream whose
// start is a pure function of (seed, epoch, g), so any draw can be made
// without the ones before it, on any rank, after any restart. The stream
// is SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", 2014): a Weyl sequence through the finalizer below.
// Only integer arithmetic is used, so every platform draws the same boxes.

// golden is 2^64 divided by the golden ratio, SplitMix64's increment.
const golden = 0x9e3779b97f4a7c15

// golden2 and golden3 are 2*golden and 3*golden modulo 2^64: each input
// of drawStream gets its own offset.
const (
	golden2 = 0x3c6ef372fe94f82a
	golden3 = 0xdaa66d2c7ddf743f
)

// mix is SplitMix64's finalizer (Stafford's variant 13), a bijection of
// uint64 whose outputs pass BigCrush for counter inputs.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// stream is the random stream of one draw.
type stream struct{ s uint64 }

// drawStream returns the stream of draw g of epoch e under seed. Each
// input goes through its own round of mix, so that nearby seeds, epochs
// and indices give unrelated streams.
func drawStream(seed uint64, epoch, g int64) stream {
	h := mix(seed + golden)
	h = mix(h ^ mix(uint64(epoch)+golden2))
	h = mix(h ^ mix(uint64(g)+golden3))
	return stream{h}
}

// next returns the stream's next 64 random bits.
func (r *stream) next() uint64 {
	r.s += golden
	return mix(r.s)
}

// below returns a uniform integer in [0, n), n > 0, by Lemire's
// multiply-and-reject ("Fast random integer generation in an interval",
// 2019): unbiased, and one 64-bit draw in all but about n/2^64 of cases.
func (r *stream) below(n int64) int64 {
	un := uint64(n)
	hi, lo := bits.Mul64(r.next(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.next(), un)
		}
	}
	return int64(hi)
}

// chance reports true with probability p53/2^53.
func (r *stream) chance(p53 uint64) bool {
	return r.next()>>11 < p53
}
