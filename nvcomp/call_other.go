//go:build !amd64

package nvcomp

import "github.com/ebitengine/purego"

// syscallPassesOpts is false where the options struct is passed through the
// RegisterFunc binding, which knows the platform's struct ABI (on arm64 a
// struct over 16 bytes is passed as a pointer to a caller-made copy).
const syscallPassesOpts = false

// decompressCall enqueues nvcompBatched<Alg>DecompressAsync: the 4.x
// signature (integers and device addresses only) through SyscallN, the
// 5.x/6.x signature through its RegisterFunc binding.
type decompressCall struct {
	c    *codec
	opts decompressOpts
	args []uintptr // 10 words, 4.x only
}

func newDecompressCall(c *codec, o decompressOpts) decompressCall {
	return decompressCall{c: c, opts: o, args: make([]uintptr, 10)}
}

func (d *decompressCall) call(a *decompressArgs) Status {
	if d.c.abi >= 5 {
		return d.c.decompressAsyncOpts(a.inPtrs, a.inBytes, a.outCapacities, a.outSizes,
			a.n, a.temp, a.tempBytes, a.outPtrs, d.opts, a.statuses, a.stream)
	}
	w := d.args
	w[0], w[1], w[2], w[3] = a.inPtrs, a.inBytes, a.outCapacities, a.outSizes
	w[4], w[5], w[6], w[7] = a.n, a.temp, a.tempBytes, a.outPtrs
	w[8], w[9] = a.statuses, a.stream
	r, _, _ := purego.SyscallN(d.c.decompressAsync, w...)
	return Status(int32(r))
}
