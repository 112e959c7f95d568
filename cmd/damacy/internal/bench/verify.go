package bench

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// verifyBatch compares every tensor of a popped batch with package zarr's
// reference reader: each sample's box of the tensor's source read with
// ReadRegion, converted as the engines convert (ptx.Float32Bits, then the
// sample's intensity transform and ptx.BFloat16Bits for bf16; ptx.IntBits
// for an integer output), then moved by the sample's transform as
// pipeline.Transform documents it (Tensor.Transforms). The first
// differing element is reported.
func verifyBatch(b *pipeline.Batch, bs *boxSet, samples []boxSample) error {
	tensors := b.Tensors()
	if len(tensors) != len(bs.Sources) {
		return fmt.Errorf("batch %d has %d tensors; the run has %d sources", b.Info().ID, len(tensors), len(bs.Sources))
	}
	for k, t := range tensors {
		if err := verifyTensor(t, k, bs, samples); err != nil {
			if len(tensors) > 1 {
				return fmt.Errorf("tensor %q: %w", t.Name(), err)
			}
			return err
		}
	}
	return nil
}

// verifyTensor checks tensor t of source k (see verifyBatch).
func verifyTensor(t *pipeline.Tensor, k int, bs *boxSet, samples []boxSample) error {
	info := t.Info()
	per := info.Dtype.Size()
	for _, n := range info.Shape[1:] {
		per *= int(n)
	}
	if int(info.Shape[0]) != len(samples) {
		return fmt.Errorf("batch %d holds %d samples; want %d", info.ID, info.Shape[0], len(samples))
	}
	data := make([]byte, per*len(samples))
	if err := t.CopyToHost(data); err != nil {
		return err
	}
	xfs := t.Transforms()
	src := &bs.Sources[k]
	arrays := map[int]*zarr.Array{}
	for n, s := range samples {
		a := arrays[s.Array]
		if a == nil {
			var err error
			if a, err = bs.levelAt(s.Array, src.Path); err != nil {
				return err
			}
			arrays[s.Array] = a
		}
		box := make([]zarr.Range, len(src.Axes))
		for j, ax := range src.Axes {
			box[j] = zarr.Range{Start: s.Box[ax][0], Stop: s.Box[ax][1]}
		}
		reg, err := a.ReadRegion(box)
		if err != nil {
			return err
		}
		var xf *pipeline.Transform
		if xfs != nil {
			xf = &xfs[n]
		}
		want, err := reference(reg, info.Dtype, xf)
		if err != nil {
			return fmt.Errorf("batch %d sample %d (%s): %w", info.ID, n, bs.sample(s), err)
		}
		got := data[n*per : (n+1)*per]
		if i := firstDiff(got, want, info.Dtype.Size()); i >= 0 {
			size := info.Dtype.Size()
			return fmt.Errorf("batch %d sample %d (%s), element %d: got bits %#x, want %#x from the reference reader%s",
				info.ID, n, bs.sample(s), i, bits(got[i*size:], size), bits(want[i*size:], size), transformNote(xf))
		}
	}
	return nil
}

// reference is what an engine writes for region reg in output type out
// (host byte order) under transform xf (nil: none).
func reference(reg *zarr.Region, out pipeline.Dtype, xf *pipeline.Transform) ([]byte, error) {
	src, ok := plan.Dtype(reg.DataType)
	if !ok {
		return nil, fmt.Errorf("no kernel type for %v", reg.DataType)
	}
	es, size := reg.DataType.Size(), out.Size()
	n := len(reg.Data) / es
	conv := make([]byte, n*size)
	var elem [8]byte
	for i := range n {
		clear(elem[:])
		copy(elem[:], reg.Data[i*es:(i+1)*es])
		v := binary.LittleEndian.Uint64(elem[:])
		if out.IsInteger() {
			b, ok := ptx.IntBits(out.Kernel(), src, v)
			if !ok {
				return nil, fmt.Errorf("element %d of the source does not fit %v", i, out)
			}
			putBits(conv[i*size:], size, b)
			continue
		}
		f := ptx.Float32Bits(src, v)
		if xf != nil && xf.Intensity {
			f = intensity(f, xf)
		}
		if out == pipeline.BF16 {
			binary.NativeEndian.PutUint16(conv[i*size:], ptx.BFloat16Bits(f))
		} else {
			binary.NativeEndian.PutUint32(conv[i*size:], f)
		}
	}
	if xf == nil {
		return conv, nil
	}
	return transformed(conv, size, reg.Shape, xf), nil
}

// intensity maps float32 bits f through xf's intensity transform:
// min(max(float32(float32(v*Scale) + Offset), Low), High), a NaN result
// the quiet NaN 0x7fc00000, as the kernels write it.
func intensity(f uint32, xf *pipeline.Transform) uint32 {
	v := math.Float32frombits(f)
	r := float32(float32(v*xf.Scale) + xf.Offset)
	if r < xf.Low {
		r = xf.Low
	} else if r > xf.High {
		r = xf.High
	}
	if r != r {
		return 0x7fc00000
	}
	return math.Float32bits(r)
}

// transformed returns the elements of x (of size bytes each, C order over
// shape) moved by xf's geometry: y = np.flip(np.transpose(x, Perm), the
// axes j with Flip[j]), so output axis j has extent shape[Perm[j]] and
// y[o] = x[i] with i[Perm[j]] = o[j], or extent-1-o[j] where flipped.
func transformed(x []byte, size int, shape []int64, xf *pipeline.Transform) []byte {
	r := len(shape)
	oshape := make([]int64, r)
	stride := make([]int64, r) // x's stride along each of its axes
	s := int64(1)
	for d := r - 1; d >= 0; d-- {
		stride[d] = s
		s *= shape[d]
	}
	for j := range r {
		oshape[j] = shape[xf.Perm[j]]
	}
	y := make([]byte, len(x))
	o := make([]int64, r)
	for e := range s {
		var at int64
		for j := range r {
			c := o[j]
			if xf.Flip[j] {
				c = oshape[j] - 1 - c
			}
			at += c * stride[xf.Perm[j]]
		}
		copy(y[int(e)*size:], x[int(at)*size:int(at+1)*size])
		for j := r - 1; j >= 0; j-- {
			if o[j]++; o[j] < oshape[j] {
				break
			}
			o[j] = 0
		}
	}
	return y
}

// putBits writes the low size bytes of v in host byte order.
func putBits(b []byte, size int, v uint64) {
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.NativeEndian.PutUint16(b, uint16(v))
	case 4:
		binary.NativeEndian.PutUint32(b, uint32(v))
	default:
		binary.NativeEndian.PutUint64(b, v)
	}
}

// bits reads the element of size bytes at b's start in host byte order.
func bits(b []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.NativeEndian.Uint16(b))
	case 4:
		return uint64(binary.NativeEndian.Uint32(b))
	}
	return binary.NativeEndian.Uint64(b)
}

// firstDiff returns the index of the first element (of size bytes) where
// a and b differ, or -1.
func firstDiff(a, b []byte, size int) int {
	for i := 0; i+size <= len(a); i += size {
		for k := range size {
			if a[i+k] != b[i+k] {
				return i / size
			}
		}
	}
	return -1
}

// transformNote describes a sample's transform for an error message.
func transformNote(xf *pipeline.Transform) string {
	if xf == nil {
		return ""
	}
	s := fmt.Sprintf(" (transform perm %v, flip %v", xf.Perm, xf.Flip)
	if xf.Intensity {
		s += fmt.Sprintf(", intensity v*%v%+v in [%v, %v]", xf.Scale, xf.Offset, xf.Low, xf.High)
	}
	return s + ")"
}
