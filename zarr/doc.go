// Package zarr is the host-side format layer: zarr v3 and v2 metadata,
// codecs and CPU decoders, sharding, chunk keys, fill values, OME-NGFF
// multiscales, and a reference region reader.
//
// # Reading
//
// Open (or OpenStore over any Store, such as NewDirStore or NewFSStore)
// reads an array's metadata; ReadRegion reads a box of it into host memory.
// OpenNGFF opens an OME-NGFF image and its levels; Inspect tells an array
// from an image or a plain group.
//
// # Staged reads
//
// A pipeline that overlaps IO, decoding and assembly uses the steps
// ReadRegion is built from, each plain data in and out:
//
//  1. Array.Plan(box, loc) resolves a box to the stored chunks it needs:
//     each Chunk names an object key and byte range (shard indexes
//     resolved through loc, where caches go) and a ChunkCodec; each Copy
//     says which block of a decoded chunk, or of the fill value, lands
//     where in the box. Chunks are identified by (Key, Offset), so plans of
//     many boxes merge and their reads sort and coalesce.
//  2. The caller reads each Chunk's bytes.
//  3. Decoder.Decode decodes a chunk's bytes into a caller-owned buffer,
//     laid out as ChunkCodec.Layout says (shape, element strides, data
//     type, byte order), so that a GPU gather can read it as is. A chunk
//     whose ChunkCodec.Route is Simple can instead go to a GPU decoder:
//     Chunk.Payload strips its checksums and the Route names the
//     compressor (zstd, lz4, blosc, gzip, zlib).
//  4. Plan.CopyChunk and Plan.FillCopy assemble the box on the CPU.
//
// # Errors
//
// Metadata problems are *MetadataError values naming the document and
// field; damaged stored data is a *FormatError naming the object and
// offset. Both wrap the sentinels ErrFormat, ErrUnsupported, ErrChecksum,
// ErrCorrupt and ErrTooLarge as they apply. Nothing is returned together
// with an error, and no input makes the package panic.
//
// Imports: the standard library, its subpackage blosc, and the pure-Go
// codecs of klauspost/compress (zstd, gzip, zlib) and pierrec/lz4; never a
// GPU package.
package zarr
