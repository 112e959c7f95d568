package blosc

import (
	"encoding/binary"
	"fmt"
)

// A Stream is one piece of a chunk's payload: a split of a block, a whole
// block, or, in a memcpyed chunk, all of the data.
type Stream struct {
	Block int  // index of the block the stream belongs to
	Src   int  // offset of the stream's bytes in the chunk, past its 4-byte length
	CSize int  // length of the stream's bytes in the chunk
	Dst   int  // offset of its decoded bytes in the chunk's output, before unshuffling
	Size  int  // decoded length
	Raw   bool // stored uncompressed (CSize == Size): copy, do not decompress
}

// streamField names s in errors: "block 3 stream 1", or "data" for the
// payload of a memcpyed chunk.
func streamField(h Header, s Stream) string {
	if h.Memcpyed() {
		return "data"
	}
	return fmt.Sprintf("block %d stream %d", s.Block, (s.Dst-s.Block*h.Blocksize)/s.Size)
}

// A Frame lists where the streams of a chunk lie and where each decodes to.
// Decoding every stream into its Dst range yields the chunk's bytes as
// DecodeNoUnshuffle returns them; Header.Shuffle says what remains to undo,
// block by block (see Unshuffle and BitUnshuffle).
type Frame struct {
	Header Header
	// Streams in chunk order: by block, and within a block by Dst. Non-raw
	// streams are compressed with Header.Compressor(). A block's streams
	// tile its output range exactly; a memcpyed chunk has one raw stream
	// (none when Nbytes is 0).
	Streams []Stream
}

// Parse validates src as a blosc1 chunk and lists its streams. It reads the
// header, the block starts and the stream lengths, and decompresses nothing.
func Parse(src []byte) (*Frame, error) {
	f := new(Frame)
	if err := f.Parse(src); err != nil {
		return nil, err
	}
	return f, nil
}

// Parse is like the package's Parse but reuses f's memory; on error f is
// left empty.
func (f *Frame) Parse(src []byte) error {
	f.Header = Header{}
	f.Streams = f.Streams[:0]
	h, err := ParseHeader(src)
	if err != nil {
		return err
	}
	err = walk(src[:h.Cbytes], h, 0, h.Blocks(), func(s Stream) error {
		f.Streams = append(f.Streams, s)
		return nil
	})
	if err != nil {
		f.Streams = f.Streams[:0]
		return err
	}
	f.Header = h
	return nil
}

// walk calls fn for every stream of blocks [from, to) of the chunk src
// (cut to h.Cbytes; see Header.Blocks), in chunk order, after checking that
// the stream lies inside src and that the block's streams tile it. It stops
// at the first error.
func walk(src []byte, h Header, from, to int, fn func(Stream) error) error {
	if h.Memcpyed() {
		if h.Nbytes == 0 || from == to {
			return nil
		}
		return fn(Stream{Src: HeaderSize, CSize: h.Nbytes, Size: h.Nbytes, Raw: true})
	}
	dataStart := HeaderSize + 4*h.nblocks()
	for j := from; j < to; j++ {
		dst := j * h.Blocksize
		bsize := min(h.Blocksize, h.Nbytes-dst)
		nsplits := h.nsplits(bsize)
		if bsize%nsplits != 0 {
			return corrupt("blocksize", 8, "blocksize %d is split into %d streams but is not a multiple of typesize", bsize, nsplits)
		}
		neblock := bsize / nsplits
		off := HeaderSize + 4*j
		start := binary.LittleEndian.Uint32(src[off:])
		if start < uint32(dataStart) || uint64(start) > uint64(len(src)) {
			return corrupt(fmt.Sprintf("bstarts[%d]", j), off, "block start %d outside %d..%d", start, dataStart, len(src))
		}
		pos := int(start)
		for k := range nsplits {
			if len(src)-pos < 4 {
				return corrupt(fmt.Sprintf("block %d stream %d", j, k), pos, "stream length runs past the chunk's end at %d", len(src))
			}
			csize := int32(binary.LittleEndian.Uint32(src[pos:]))
			if csize <= 0 || int(csize) > len(src)-pos-4 {
				return corrupt(fmt.Sprintf("block %d stream %d", j, k), pos, "stream length %d outside 1..%d", csize, len(src)-pos-4)
			}
			s := Stream{Block: j, Src: pos + 4, CSize: int(csize), Dst: dst + k*neblock, Size: neblock, Raw: int(csize) == neblock}
			if err := fn(s); err != nil {
				return err
			}
			pos += 4 + int(csize)
		}
	}
	return nil
}
