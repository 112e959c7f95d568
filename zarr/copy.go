package zarr

import (
	"encoding/binary"
	"math/bits"
)

// cLayout returns the C-order little-endian layout of shape.
func cLayout(shape []int64, dt DataType) Layout {
	strides := make([]int64, len(shape))
	s := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = s
		s *= shape[i]
	}
	return Layout{Shape: shape, Strides: strides, DataType: dt, Endian: LittleEndian}
}

// copyBlock copies the block of extent ext that starts at sOrigin in src
// (laid out as sl) to dOrigin in dst (laid out as dl, which must be
// little-endian), converting the byte order and normalising bools to 0/1.
// The caller has checked every index against the layouts' shapes.
func copyBlock(dst []byte, dl Layout, dOrigin []int64, src []byte, sl Layout, sOrigin []int64, ext []int64) {
	size := int64(dl.DataType.Size())
	for _, e := range ext {
		if e == 0 {
			return
		}
	}
	swap := sl.Endian == BigEndian && size > 1
	isBool := dl.DataType == Bool
	rank := len(ext)
	if rank == 0 {
		convert(dst, src, 1, 1, 1, size, swap, isBool)
		return
	}
	last := rank - 1
	n := ext[last]
	ds, ss := dl.Strides[last], sl.Strides[last]
	var idxBuf [maxRank]int64
	idx := idxBuf[:last]
	for {
		doff := (dOrigin[last]) * ds
		soff := (sOrigin[last]) * ss
		for k, i := range idx {
			doff += (dOrigin[k] + i) * dl.Strides[k]
			soff += (sOrigin[k] + i) * sl.Strides[k]
		}
		if !swap && !isBool && ds == 1 && ss == 1 {
			copy(dst[doff*size:(doff+n)*size], src[soff*size:(soff+n)*size])
		} else {
			convert(dst[doff*size:], src[soff*size:], n, ds, ss, size, swap, isBool)
		}
		k := last - 1
		for ; k >= 0; k-- {
			idx[k]++
			if idx[k] < ext[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}

// convert copies n elements of size bytes, ds and ss elements apart, from
// src to dst, swapping bytes and normalising bools as asked.
func convert(dst, src []byte, n, ds, ss, size int64, swap, isBool bool) {
	le, be := binary.LittleEndian, binary.BigEndian
	switch {
	case isBool:
		for j := int64(0); j < n; j++ {
			var v byte
			if src[j*ss] != 0 {
				v = 1
			}
			dst[j*ds] = v
		}
	case size == 1:
		for j := int64(0); j < n; j++ {
			dst[j*ds] = src[j*ss]
		}
	case size == 2 && swap:
		for j := int64(0); j < n; j++ {
			le.PutUint16(dst[j*ds*2:], be.Uint16(src[j*ss*2:]))
		}
	case size == 2:
		for j := int64(0); j < n; j++ {
			le.PutUint16(dst[j*ds*2:], le.Uint16(src[j*ss*2:]))
		}
	case size == 4 && swap:
		for j := int64(0); j < n; j++ {
			le.PutUint32(dst[j*ds*4:], bits.ReverseBytes32(le.Uint32(src[j*ss*4:])))
		}
	case size == 4:
		for j := int64(0); j < n; j++ {
			le.PutUint32(dst[j*ds*4:], le.Uint32(src[j*ss*4:]))
		}
	case swap:
		for j := int64(0); j < n; j++ {
			le.PutUint64(dst[j*ds*8:], bits.ReverseBytes64(le.Uint64(src[j*ss*8:])))
		}
	default:
		for j := int64(0); j < n; j++ {
			le.PutUint64(dst[j*ds*8:], le.Uint64(src[j*ss*8:]))
		}
	}
}

// fillBlock writes the element fill over the block of extent ext at origin
// in dst (laid out as dl).
func fillBlock(dst []byte, dl Layout, origin []int64, ext []int64, fill []byte) {
	size := int64(len(fill))
	for _, e := range ext {
		if e == 0 {
			return
		}
	}
	rank := len(ext)
	if rank == 0 {
		copy(dst, fill)
		return
	}
	last := rank - 1
	n := ext[last]
	ds := dl.Strides[last]
	var idxBuf [maxRank]int64
	idx := idxBuf[:last]
	for {
		off := origin[last] * ds
		for k, i := range idx {
			off += (origin[k] + i) * dl.Strides[k]
		}
		if ds == 1 {
			run := dst[off*size : (off+n)*size]
			w := copy(run, fill)
			for w < len(run) {
				w += copy(run[w:], run[:w])
			}
		} else {
			for j := int64(0); j < n; j++ {
				copy(dst[(off+j*ds)*size:], fill)
			}
		}
		k := last - 1
		for ; k >= 0; k-- {
			idx[k]++
			if idx[k] < ext[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}
