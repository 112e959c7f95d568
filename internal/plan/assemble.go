package plan

import (
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// Dtype is the kernels' type of zarr data type t; false when the kernels
// have no cast from it.
func Dtype(t zarr.DataType) (ptx.Dtype, bool) {
	switch t {
	case zarr.Bool:
		return ptx.Bool, true
	case zarr.Int8:
		return ptx.Int8, true
	case zarr.Int16:
		return ptx.Int16, true
	case zarr.Int32:
		return ptx.Int32, true
	case zarr.Int64:
		return ptx.Int64, true
	case zarr.Uint8:
		return ptx.Uint8, true
	case zarr.Uint16:
		return ptx.Uint16, true
	case zarr.Uint32:
		return ptx.Uint32, true
	case zarr.Uint64:
		return ptx.Uint64, true
	case zarr.Float16:
		return ptx.Float16, true
	case zarr.Float32:
		return ptx.Float32, true
	case zarr.Float64:
		return ptx.Float64, true
	}
	return 0, false
}

// FillBits is a fill value (its little-endian bytes, as zarr.Array.FillValue
// and zarr.Plan.Fill give it) of data type dt, as the float32 bits the
// kernels take.
func FillBits(dt ptx.Dtype, fill []byte) uint32 {
	return ptx.Float32Bits(dt, FillValue(fill))
}

// FillValue returns an array's fill value (little-endian bytes, as
// zarr.Array.FillValue gives them) as the value bits the kernels' casts
// take (ptx.Float32Bits, ptx.FillFor).
func FillValue(fill []byte) uint64 {
	var v uint64
	for i := len(fill) - 1; i >= 0; i-- {
		v = v<<8 | uint64(fill[i])
	}
	return v
}

// Source describes a decoded chunk of data type dt and layout l as the
// gather reads it. Offset, where the chunk lies, is the caller's to set;
// so is the shuffle a blosc chunk may still be in.
func Source(dt ptx.Dtype, l zarr.Layout) ptx.Source {
	return ptx.Source{Dtype: dt, BigEndian: l.Endian == zarr.BigEndian, Shape: ints(l.Shape), Strides: ints(l.Strides)}
}

// AddOp adds copy c to the assemble plan p: a fill with fill (FillBits) when
// c.Job < 0, else a gather from src, the decoded chunk of the copy's job.
// It returns the number of output elements the op writes.
func AddOp(p *ptx.Plan, c *Copy, src *ptx.Source, fill uint32) (int64, error) {
	n := int64(1)
	for _, e := range c.Shape {
		n *= e
	}
	dst, ext := ints(c.Dst), ints(c.Shape)
	if c.Job < 0 {
		return n, p.Fill(c.Sample, dst, ext, fill)
	}
	return n, p.Copy(c.Sample, dst, ext, src, ints(c.Src))
}

func ints(s []int64) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[i] = int(v)
	}
	return out
}
