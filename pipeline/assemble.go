package pipeline

import (
	"errors"
	"fmt"

	"github.com/damacy-go/damacy/ptx"
)

// Kernel is d as the assemble kernel (package ptx) numbers it.
func (d Dtype) Kernel() ptx.Dtype {
	switch d {
	case BF16:
		return ptx.BFloat16
	case U8:
		return ptx.Uint8
	case I32:
		return ptx.Int32
	case I64:
		return ptx.Int64
	}
	return ptx.Float32
}

// Kernel is t as the assemble kernel (package ptx) takes it.
func (t *Transform) Kernel() ptx.Transform {
	k := ptx.Identity()
	for j, a := range t.Perm {
		k.Perm[j] = uint8(a)
		if t.Flip[j] {
			k.Flips |= 1 << j
		}
	}
	if t.Intensity {
		k.Intensity, k.Scale, k.Offset, k.Lo, k.Hi = true, t.Scale, t.Offset, t.Low, t.High
	}
	return k
}

// setTransforms gives plan p the transforms of the batch it assembles.
func setTransforms(p *ptx.Plan, req *batchReq) error {
	for n := range req.xf {
		if err := p.SetTransform(n, req.xf[n].Kernel()); err != nil {
			return newError("assemble", ErrInvalid, req.samples[n].URI, fmt.Errorf("sample %d (%s): %w", n, req.samples[n], err))
		}
	}
	return nil
}

// misfitError reports the values of a batch that do not fit its integer
// output type (nil when every one fits), naming the first one's sample
// (and numbering it, in the ptx error too, by its position).
func misfitError(req *batchReq, ms ptx.MisfitStatus, l ptx.Layout) error {
	err := ms.Err(l)
	if err == nil {
		return nil
	}
	var me *ptx.MisfitError
	if errors.As(err, &me) && me.Sample >= 0 && me.Sample < len(req.samples) {
		n := me.Sample
		if pos := req.position(n); pos > 0 {
			c := *me
			c.Sample = int(pos)
			err = &c
		}
		return sampleError(req, n, newError("assemble", ErrDtype, req.samples[n].URI, err))
	}
	return newError("assemble", ErrDtype, "", err)
}
