package bench

import (
	"encoding/binary"
	"fmt"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/pipeline/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// verifyBatch compares a popped batch with package zarr's reference reader:
// each sample's box read with ReadRegion and converted as the engines
// convert (ptx.Float32Bits, then ptx.BFloat16Bits for bf16). The first
// differing element is reported.
func verifyBatch(b *pipeline.Batch, bs *boxSet, samples []boxSample) error {
	info := b.Info()
	size := info.Dtype.Size()
	per := size
	for _, n := range info.Shape[1:] {
		per *= int(n)
	}
	data := make([]byte, per*b.Len())
	if err := b.CopyToHost(data); err != nil {
		return err
	}
	if len(data) != per*len(samples) {
		return fmt.Errorf("batch %d holds %d bytes; want %d for %d samples", info.ID, len(data), per*len(samples), len(samples))
	}
	arrays := map[int]*zarr.Array{}
	for k, s := range samples {
		a := arrays[s.Array]
		if a == nil {
			var err error
			if a, err = bs.level(s.Array); err != nil {
				return err
			}
			arrays[s.Array] = a
		}
		box := make([]zarr.Range, len(s.Box))
		for d, r := range s.Box {
			box[d] = zarr.Range{Start: r[0], Stop: r[1]}
		}
		reg, err := a.ReadRegion(box)
		if err != nil {
			return err
		}
		src, ok := plan.Dtype(reg.DataType)
		if !ok {
			return fmt.Errorf("no kernel type for %v", reg.DataType)
		}
		es := reg.DataType.Size()
		got := data[k*per : (k+1)*per]
		var elem [8]byte
		for i := range len(reg.Data) / es {
			clear(elem[:])
			copy(elem[:], reg.Data[i*es:(i+1)*es])
			f := ptx.Float32Bits(src, binary.LittleEndian.Uint64(elem[:]))
			var want, have uint32
			if info.Dtype == pipeline.BF16 {
				want, have = uint32(ptx.BFloat16Bits(f)), uint32(binary.NativeEndian.Uint16(got[2*i:]))
			} else {
				want, have = f, binary.NativeEndian.Uint32(got[4*i:])
			}
			if want != have {
				return fmt.Errorf("batch %d sample %d (%s), element %d: got bits %#x, want %#x from the reference reader",
					info.ID, k, bs.sample(s), i, have, want)
			}
		}
	}
	return nil
}
