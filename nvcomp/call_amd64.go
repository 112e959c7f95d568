package nvcomp

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// syscallPassesOpts is true where decompressCall passes the 5.x/6.x options
// struct through SyscallN, so the RegisterFunc binding is not needed.
const syscallPassesOpts = true

// decompressCall enqueues nvcompBatched<Alg>DecompressAsync through
// purego.SyscallN with an argument slice owned by the caller, which makes a
// call allocation-free and about 7× cheaper than a RegisterFunc binding
// (measured on amd64 with nvCOMP 6.0: 0.14 µs and 0 allocations against
// 1.3 µs and 14 allocations per call).
//
// On amd64 (System V) the 64-byte options struct is of class MEMORY: the
// caller copies it onto the stack, in argument order, exactly as it would
// eight integer arguments that no longer fit in registers. The first six
// arguments take the six integer registers, so from the seventh on every
// word goes to the stack in order, and the struct can be spelled as eight
// words between the output pointers and the statuses. Every argument is an
// integer or a device address: no Go pointer crosses this call.
type decompressCall struct {
	fn   uintptr
	opts bool      // the 11-argument 5.x/6.x signature; its struct is args[8:16]
	args []uintptr // 10 words (4.x) or 18 words (5.x/6.x)
}

func newDecompressCall(c *codec, o decompressOpts) decompressCall {
	d := decompressCall{fn: c.decompressAsync, opts: c.abi >= 5}
	if d.opts {
		d.args = make([]uintptr, 18)
		copy(d.args[8:16], (*[8]uintptr)(unsafe.Pointer(&o))[:])
	} else {
		d.args = make([]uintptr, 10)
	}
	return d
}

func (d *decompressCall) call(a *decompressArgs) Status {
	w := d.args
	w[0], w[1], w[2], w[3] = a.inPtrs, a.inBytes, a.outCapacities, a.outSizes
	w[4], w[5], w[6], w[7] = a.n, a.temp, a.tempBytes, a.outPtrs
	if d.opts {
		w[16], w[17] = a.statuses, a.stream
	} else {
		w[8], w[9] = a.statuses, a.stream
	}
	r, _, _ := purego.SyscallN(d.fn, w...)
	return Status(int32(r))
}
