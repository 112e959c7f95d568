package zarr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

func init() {
	registerCodec("zstd", parseZstd)
	registerCodec("numcodecs.zstd", parseZstd)
	registerCodec("gzip", parseGzip)
	registerCodec("numcodecs.gzip", parseGzip)
	registerCodec("numcodecs.zlib", parseZlib)
	registerCodec("numcodecs.lz4", parseLZ4)
	registerCodec("crc32c", parseChecksum)
	registerCodec("numcodecs.crc32c", parseChecksum)
	registerCodec("numcodecs.crc32", parseChecksum)
	registerCodec("numcodecs.adler32", parseChecksum)
}

// errShortDst is returned by bytesToBytes.decode when the output does not
// fit the destination.
var errShortDst = errors.New("output larger than the destination")

// sizeHinter is implemented by codecs that can read the decoded size from
// a header; the hint only sizes scratch buffers and is never trusted.
type sizeHinter interface {
	sizeHint(src []byte) (int, bool)
}

// zstdCodec is zstd (zarr v3 "zstd", numcodecs "zstd"): one or more
// frames, with or without content sizes and checksums.
type zstdCodec struct{}

func (zstdCodec) codecName() string        { return "zstd" }
func (zstdCodec) compression() Compression { return CompressionZstd }

func parseZstd(spec codecSpec, _ chunkSpec) (codec, error) {
	var cfg struct {
		Level    *int  `json:"level"`
		Checksum *bool `json:"checksum"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	if cfg.Level != nil && (*cfg.Level < -131072 || *cfg.Level > 22) {
		return nil, malformed("zstd level %d is outside -131072..22", *cfg.Level)
	}
	return zstdCodec{}, nil
}

func (zstdCodec) decode(d *Decoder, dst, src []byte) (int, error) {
	// The decoder stays inside cap(dst), which Decoder.Decode limits to
	// the chunk and its slack: the bytes past that may belong to a
	// neighbouring chunk. With the slack, it decodes the last block on its
	// fast path.
	out, err := d.zstd.DecodeAll(src, dst[:0:cap(dst)])
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return 0, errShortDst
	case errors.Is(err, zstd.ErrCRCMismatch):
		return 0, &reason{kind: ErrChecksum, msg: "zstd content checksum mismatch"}
	case err != nil:
		return 0, corrupt(err, "zstd")
	case len(out) > len(dst) || len(out) > 0 && &out[0] != &dst[0]:
		return 0, errShortDst
	}
	return len(out), nil
}

func (zstdCodec) sizeHint(src []byte) (int, bool) {
	var h zstd.Header
	if h.Decode(src) != nil || !h.HasFCS || h.FrameContentSize > uint64(maxInt) {
		return 0, false
	}
	return int(h.FrameContentSize), true
}

// deflateCodec is gzip (zarr v3 "gzip", numcodecs "gzip") or zlib
// (numcodecs "zlib").
type deflateCodec struct{ zlib bool }

func (c deflateCodec) codecName() string {
	if c.zlib {
		return "zlib"
	}
	return "gzip"
}

func (c deflateCodec) compression() Compression {
	if c.zlib {
		return CompressionZlib
	}
	return CompressionGzip
}

func parseGzip(spec codecSpec, _ chunkSpec) (codec, error) { return parseDeflate(spec, false) }
func parseZlib(spec codecSpec, _ chunkSpec) (codec, error) { return parseDeflate(spec, true) }

func parseDeflate(spec codecSpec, isZlib bool) (codec, error) {
	var cfg struct {
		Level *int `json:"level"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	if cfg.Level != nil && (*cfg.Level < -1 || *cfg.Level > 9) {
		return nil, malformed("level %d is outside 0..9", *cfg.Level)
	}
	return deflateCodec{zlib: isZlib}, nil
}

func (c deflateCodec) decode(d *Decoder, dst, src []byte) (int, error) {
	d.br.Reset(src)
	var r io.Reader
	if c.zlib {
		if d.zlib == nil {
			zr, err := zlib.NewReader(&d.br)
			if err != nil {
				return 0, c.fail(err)
			}
			d.zlib = zr
		} else if err := d.zlib.(zlib.Resetter).Reset(&d.br, nil); err != nil {
			return 0, c.fail(err)
		}
		r = d.zlib
	} else {
		if d.gzip == nil {
			gr, err := gzip.NewReader(&d.br)
			if err != nil {
				return 0, c.fail(err)
			}
			d.gzip = gr
		} else if err := d.gzip.Reset(&d.br); err != nil {
			return 0, c.fail(err)
		}
		r = d.gzip
	}
	n := 0
	for n < len(dst) {
		m, err := r.Read(dst[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, c.fail(err)
		}
	}
	// dst is full: the stream must end here, and reading on checks the
	// trailer.
	var one [1]byte
	for {
		m, err := r.Read(one[:])
		if m > 0 {
			return 0, errShortDst
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, c.fail(err)
		}
	}
}

func (c deflateCodec) fail(err error) error {
	if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, zlib.ErrChecksum) {
		return &reason{kind: ErrChecksum, msg: c.codecName() + " checksum mismatch"}
	}
	return corrupt(err, "%s", c.codecName())
}

// sizeHint reads gzip's ISIZE trailer (the size modulo 2^32 of the last
// member).
func (c deflateCodec) sizeHint(src []byte) (int, bool) {
	if c.zlib || len(src) < 18 {
		return 0, false
	}
	return int(binary.LittleEndian.Uint32(src[len(src)-4:])), true
}

// lz4Codec is numcodecs lz4: a 4-byte little-endian decoded size followed
// by one raw LZ4 block.
type lz4Codec struct{}

func (lz4Codec) codecName() string        { return "lz4" }
func (lz4Codec) compression() Compression { return CompressionLZ4 }

func parseLZ4(spec codecSpec, _ chunkSpec) (codec, error) {
	var cfg struct {
		Acceleration *int `json:"acceleration"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	return lz4Codec{}, nil
}

func (lz4Codec) decode(_ *Decoder, dst, src []byte) (int, error) {
	if len(src) < 4 {
		return 0, corrupt(nil, "lz4: %d bytes, shorter than the 4-byte size prefix", len(src))
	}
	n := binary.LittleEndian.Uint32(src)
	if uint64(n) > uint64(len(dst)) {
		return 0, errShortDst
	}
	got, err := lz4.UncompressBlock(src[4:], dst[:n])
	if err != nil {
		return 0, corrupt(err, "lz4")
	}
	if got != int(n) {
		return 0, corrupt(nil, "lz4: block decodes to %d bytes, its prefix says %d", got, n)
	}
	return got, nil
}

func (lz4Codec) sizeHint(src []byte) (int, bool) {
	if len(src) < 4 {
		return 0, false
	}
	return int(binary.LittleEndian.Uint32(src)), true
}

// checksumCodec is a 4-byte checksum of the data, stored before or after
// it: zarr v3 "crc32c" (after), numcodecs "crc32c" (after by default),
// "crc32" and "adler32" (before by default).
type checksumCodec struct {
	name    string // crc32c, crc32 or adler32
	atStart bool
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (c *checksumCodec) codecName() string        { return c.name }
func (c *checksumCodec) compression() Compression { return CompressionNone }

func parseChecksum(spec codecSpec, _ chunkSpec) (codec, error) {
	c := &checksumCodec{name: spec.name}
	c.name = strings.TrimPrefix(c.name, "numcodecs.")
	c.atStart = c.name != "crc32c"
	if spec.name == "crc32c" { // the zarr v3 codec has no configuration
		var cfg struct{}
		return c, parseConfig(spec, &cfg)
	}
	var cfg struct {
		Location *string `json:"location"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	if cfg.Location != nil {
		switch *cfg.Location {
		case "start":
			c.atStart = true
		case "end":
			c.atStart = false
		default:
			return nil, malformed("checksum location %q is neither \"start\" nor \"end\"", *cfg.Location)
		}
	}
	return c, nil
}

func (c *checksumCodec) sum(b []byte) uint32 {
	switch c.name {
	case "crc32":
		return crc32.ChecksumIEEE(b)
	case "adler32":
		return adler32.Checksum(b)
	}
	return crc32.Checksum(b, castagnoli)
}

// strip verifies the checksum and returns the data without it.
func (c *checksumCodec) strip(src []byte) ([]byte, error) {
	if len(src) < 4 {
		return nil, corrupt(nil, "%s: %d bytes, shorter than the checksum", c.name, len(src))
	}
	var stored uint32
	var data []byte
	if c.atStart {
		stored, data = binary.LittleEndian.Uint32(src), src[4:]
	} else {
		stored, data = binary.LittleEndian.Uint32(src[len(src)-4:]), src[:len(src)-4]
	}
	if got := c.sum(data); got != stored {
		return nil, &reason{kind: ErrChecksum, msg: c.name + " mismatch: stored " + hex32(stored) + ", computed " + hex32(got)}
	}
	return data, nil
}

func (c *checksumCodec) decode(_ *Decoder, dst, src []byte) (int, error) {
	data, err := c.strip(src)
	if err != nil {
		return 0, err
	}
	if len(data) > len(dst) {
		return 0, errShortDst
	}
	return copy(dst, data), nil
}

func (c *checksumCodec) sizeHint(src []byte) (int, bool) { return max(len(src)-4, 0), true }

func hex32(v uint32) string { return fmt.Sprintf("%#08x", v) }

// maxInt is the largest int, as a uint64 bound.
const maxInt = int(^uint(0) >> 1)
