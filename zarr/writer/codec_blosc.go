package writer

import (
	"github.com/damacy-go/damacy/zarr/blosc"
)

// checkBlosc validates the blosc fields of c.
func (c Compression) checkBlosc() error {
	switch c.BloscCompressor {
	case blosc.BloscLZ, blosc.LZ4, blosc.LZ4HC, blosc.Zlib, blosc.Zstd:
	case blosc.Snappy:
		return specErr("Spec.Compression.BloscCompressor", "snappy is refused: numcodecs' blosc is built without it, so zarr-python could not read the array")
	default:
		return specErr("Spec.Compression.BloscCompressor", "unknown compressor %v", c.BloscCompressor)
	}
	switch c.Shuffle {
	case blosc.NoShuffle, blosc.ByteShuffle, blosc.BitShuffle:
	default:
		return specErr("Spec.Compression.Shuffle", "must be blosc.NoShuffle, blosc.ByteShuffle or blosc.BitShuffle, not %v", c.Shuffle)
	}
	if c.Blocksize < 0 {
		return specErr("Spec.Compression.Blocksize", "is negative: %d", c.Blocksize)
	}
	return nil
}

// encodeBlosc compresses one chunk into a blosc1 chunk, with an encoder kept
// in e.
func (e *chunkEncoder) encodeBlosc(data []byte) ([]byte, error) {
	if e.blosc == nil {
		c := e.l.spec.Compression
		enc, err := blosc.NewEncoder(blosc.Options{
			Compressor: c.BloscCompressor,
			Level:      c.Level,
			Shuffle:    c.Shuffle,
			Typesize:   e.l.ti.size,
			Blocksize:  c.Blocksize,
		})
		if err != nil {
			return nil, err
		}
		e.blosc = enc
	}
	var err error
	e.comp, err = e.blosc.Encode(e.comp[:0], data)
	return e.comp, err
}
