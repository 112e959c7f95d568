package zarrtest

import "encoding/binary"

// BloscLZStream wraps one blosclz stream in a blosc1 chunk of one block
// and one stream (typesize 1, no shuffle, the dont-split flag) that
// decodes to size bytes, so that a blosc decoder can be asked about the
// stream alone. A stream of exactly size bytes is, by blosc's rule, stored
// raw.
func BloscLZStream(stream []byte, size int) []byte {
	const header = 16 // blosc1's header; then one block start and the stream's length
	c := make([]byte, header+8, header+8+len(stream))
	c[0], c[1], c[2], c[3] = 2, 1, 0x10, 1 // format 2, codec version 1, dont-split and blosclz, typesize 1
	binary.LittleEndian.PutUint32(c[4:], uint32(size))
	binary.LittleEndian.PutUint32(c[8:], uint32(size))
	binary.LittleEndian.PutUint32(c[12:], uint32(header+8+len(stream)))
	binary.LittleEndian.PutUint32(c[16:], uint32(header+4))
	binary.LittleEndian.PutUint32(c[20:], uint32(len(stream)))
	return append(c, stream...)
}
