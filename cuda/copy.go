package cuda

import (
	"strconv"
	"structs"
	"unsafe"
)

// CopyHtoD copies len(src) bytes from host memory to dst and returns when
// src may be reused. It wraps cuMemcpyHtoD_v2.
func CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyHtoD_v2", bytesArg(len(src)), d.cuMemcpyHtoD_v2(dst, unsafe.Pointer(&src[0]), uintptr(len(src))))
}

// CopyDtoH copies len(dst) bytes from src to host memory and returns when
// they have arrived. It wraps cuMemcpyDtoH_v2.
func CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoH_v2", bytesArg(len(dst)), d.cuMemcpyDtoH_v2(unsafe.Pointer(&dst[0]), src, uintptr(len(dst))))
}

// CopyDtoD copies n bytes between device buffers. It wraps
// cuMemcpyDtoD_v2, which is asynchronous to the host for most transfers.
func CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return negativeSize("CopyDtoD", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoD_v2", bytesArg(n), d.cuMemcpyDtoD_v2(dst, src, uintptr(n)))
}

// MemsetD8 sets n bytes at dst to v. It wraps cuMemsetD8_v2.
func MemsetD8(dst DevicePtr, v byte, n int) error {
	if n < 0 {
		return negativeSize("MemsetD8", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD8_v2", bytesArg(n), d.cuMemsetD8_v2(dst, v, uintptr(n)))
}

// CopyHtoD queues a copy of src to dst on the stream. The copy is
// asynchronous only from page-locked memory (HostBuffer.Bytes); src must
// then stay alive and unchanged until the stream has passed the copy.
// From pageable Go memory the driver stages the data before returning.
// It wraps cuMemcpyHtoDAsync_v2.
func (s Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyHtoDAsync_v2", bytesArg(len(src)), d.cuMemcpyHtoDAsync_v2(dst, unsafe.Pointer(&src[0]), uintptr(len(src)), s))
}

// HostCopy is one copy of a batch: Src (page-locked host memory) to Dst.
type HostCopy struct {
	Dst DevicePtr
	Src []byte
}

// memcpyAttributes is a CUmemcpyAttributes.
type memcpyAttributes struct {
	_              structs.HostLayout
	srcAccessOrder uint32 // CUmemcpySrcAccessOrder
	srcLocType     uint32 // CUmemLocation srcLocHint
	srcLocID       int32
	dstLocType     uint32 // CUmemLocation dstLocHint
	dstLocID       int32
	flags          uint32
}

// memcpySrcAccessOrderStream is CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: the
// sources are read in stream order.
const memcpySrcAccessOrderStream = 1

// CopyHtoDBatch queues copies, from page-locked host memory to the
// device, on the stream in one call where the driver has
// cuMemcpyBatchAsync (CUDA 12.8 and later; cuMemcpyBatchAsync_v2 from
// 13.0), else one cuMemcpyHtoDAsync_v2 each. The batch runs in stream
// order as a whole, the copies within it in no given order: their
// destinations must not overlap. The sources must stay page-locked and
// unchanged until the stream has passed the batch. Empty copies are
// skipped.
func (s Stream) CopyHtoDBatch(copies []HostCopy) error {
	d, err := api()
	if err != nil {
		return err
	}
	n := 0
	for _, c := range copies {
		if len(c.Src) > 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if n == 1 || (d.cuMemcpyBatchAsync_v2 == nil && d.cuMemcpyBatchAsync == nil) {
		for _, c := range copies {
			if err := s.CopyHtoD(c.Dst, c.Src); err != nil {
				return err
			}
		}
		return nil
	}
	dsts, srcs, sizes := make([]DevicePtr, 0, n), make([]DevicePtr, 0, n), make([]uintptr, 0, n)
	var total int
	for _, c := range copies {
		if len(c.Src) > 0 {
			dsts = append(dsts, c.Dst)
			srcs = append(srcs, DevicePtr(unsafe.Pointer(&c.Src[0])))
			sizes = append(sizes, uintptr(len(c.Src)))
			total += len(c.Src)
		}
	}
	attrs := memcpyAttributes{srcAccessOrder: memcpySrcAccessOrderStream}
	var idx uintptr
	if d.cuMemcpyBatchAsync_v2 != nil {
		return checkArg("cuMemcpyBatchAsync_v2", bytesArg(total), d.cuMemcpyBatchAsync_v2(&dsts[0], &srcs[0], &sizes[0], uintptr(n), &attrs, &idx, 1, s))
	}
	var fail uintptr
	return checkArg("cuMemcpyBatchAsync", bytesArg(total), d.cuMemcpyBatchAsync(&dsts[0], &srcs[0], &sizes[0], uintptr(n), &attrs, &idx, 1, &fail, s))
}

// CopyDtoH queues a copy of len(dst) bytes from src into dst on the
// stream. dst should be page-locked memory (HostBuffer.Bytes); it must
// stay alive, and its contents are valid only once the stream has passed
// the copy (Stream.Synchronize, or an Event recorded after it). It wraps
// cuMemcpyDtoHAsync_v2.
func (s Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoHAsync_v2", bytesArg(len(dst)), d.cuMemcpyDtoHAsync_v2(unsafe.Pointer(&dst[0]), src, uintptr(len(dst)), s))
}

// CopyDtoD queues a copy of n bytes between device buffers on the stream.
// It wraps cuMemcpyDtoDAsync_v2.
func (s Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return negativeSize("CopyDtoD", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoDAsync_v2", bytesArg(n), d.cuMemcpyDtoDAsync_v2(dst, src, uintptr(n), s))
}

// MemsetD8 queues setting n bytes at dst to v on the stream. It wraps
// cuMemsetD8Async.
func (s Stream) MemsetD8(dst DevicePtr, v byte, n int) error {
	if n < 0 {
		return negativeSize("MemsetD8", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD8Async", bytesArg(n), d.cuMemsetD8Async(dst, v, uintptr(n), s))
}

// MemsetD16 queues setting n 16-bit values at dst (2-byte aligned) to v
// on the stream. It wraps cuMemsetD16Async.
func (s Stream) MemsetD16(dst DevicePtr, v uint16, n int) error {
	if n < 0 {
		return negativeSize("MemsetD16", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD16Async", strconv.Itoa(n)+" values", d.cuMemsetD16Async(dst, v, uintptr(n), s))
}

// MemsetD32 queues setting n 32-bit values at dst (4-byte aligned) to v
// on the stream (a float32 fill is MemsetD32(dst, math.Float32bits(f),
// n)). It wraps cuMemsetD32Async.
func (s Stream) MemsetD32(dst DevicePtr, v uint32, n int) error {
	if n < 0 {
		return negativeSize("MemsetD32", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD32Async", strconv.Itoa(n)+" values", d.cuMemsetD32Async(dst, v, uintptr(n), s))
}
