package zarr

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// Region is a box read from an array.
type Region struct {
	DataType DataType
	Shape    []int64 // the box's extent along each axis
	// Data holds the elements in C order, little-endian: bool as one byte 0
	// or 1, float16 as IEEE binary16 bits.
	Data []byte
}

// ReadRegion reads box, one Range per axis, sequentially and on the CPU:
// it is the reference reader the pipeline's engines are checked against.
// The box may reach outside the array (negative starts included); outside
// elements, and those of missing chunks and shards, are the fill value.
//
// It decodes with a Decoder of default options; chunks larger than
// DefaultMaxChunkBytes fail with ErrTooLarge. Corrupt data fails with a
// *FormatError naming the object; nothing is returned with an error.
func (a *Array) ReadRegion(box []Range) (*Region, error) {
	p, err := a.Plan(box, nil)
	if err != nil {
		return nil, err
	}
	size := int64(p.DataType.Size())
	for _, n := range p.Shape {
		if n != 0 && size > math.MaxInt/n {
			return nil, fmt.Errorf("zarr: %s: box %v is too large to hold in memory", a.metaKey, box)
		}
		size *= n
	}
	region := make([]byte, size)
	d, err := NewDecoder(DecoderOptions{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := a.execute(p, region, d); err != nil {
		return nil, err
	}
	return &Region{DataType: p.DataType, Shape: slices.Clone(p.Shape), Data: region}, nil
}

// execute reads, decodes and copies every chunk of p into region.
func (a *Array) execute(p *Plan, region []byte, d *Decoder) error {
	var stored, decoded []byte
	current := -1
	for _, op := range p.Copies {
		if op.Chunk < 0 {
			if err := p.FillCopy(region, op); err != nil {
				return err
			}
			continue
		}
		if op.Chunk != current {
			ch := &p.Chunks[op.Chunk]
			var err error
			if stored, err = readChunk(a.store, ch, stored, d.max); err != nil {
				return err
			}
			decoded = grow(decoded, ch.Codec.size)
			if err := d.Decode(decoded, ch, stored); err != nil {
				return err
			}
			current = op.Chunk
		}
		if err := p.CopyChunk(region, op, decoded); err != nil {
			return err
		}
	}
	return nil
}

// readChunk reads ch's stored bytes into buf (grown as needed, up to
// limit bytes).
func readChunk(s Store, ch *Chunk, buf []byte, limit int) ([]byte, error) {
	if ch.Length > int64(limit) {
		return nil, &FormatError{Key: ch.Key, Offset: ch.Offset, Err: tooLarge("stored chunk", int(min(ch.Length, math.MaxInt)), limit)}
	}
	buf = grow(buf, int(ch.Length))
	n, err := s.ReadAt(ch.Key, buf, ch.Offset)
	if n == len(buf) {
		return buf, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return nil, &FormatError{Key: ch.Key, Offset: ch.Offset, Err: malformed("truncated: read %d of %d bytes", n, len(buf))}
	}
	return nil, err
}

// grow returns a slice of length n, reusing b's storage when it is large
// enough.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n)
}
