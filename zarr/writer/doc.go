// Package writer writes zarr v3 and v2 arrays and OME-NGFF 0.5 multiscale
// groups to a local directory. It is what `damacy gen`, the tests and the
// benchmarks use to make stores; the pipeline never writes.
//
// An array is described by a [Spec] and created with [Create], which
// validates the spec and writes the metadata. Data is then written block by
// block: a block is the region stored in one object, a shard of a sharded
// array or a chunk of an unsharded one. Every block is encoded and written
// independently, in one piece (a temporary file renamed into place), so
// several goroutines may write different blocks of one array at once; the
// chunks of a block are compressed in parallel too. [Array.WriteRegion]
// writes a block-aligned region from a caller's buffer; [Array.WriteFrom]
// writes the whole array from a generator function, in parallel, holding
// about one chunk per goroutine and one compressed block per block in
// progress.
//
// [Synth] is a deterministic synthetic data generator (a smooth field, random
// low bits and a fraction of uniformly random voxels), for every data type;
// the bytes it makes depend only on its fields and the voxel coordinates, not
// on how the array is split between goroutines.
//
// [CreateNGFF] makes an OME-NGFF 0.5 image group whose levels are 2x
// downsamplings of level 0 along its space axes; [Multiscale.Downsample]
// computes them from level 0 once level 0 has been written.
//
// Data passed in and out is always little-endian and in C order, whatever the
// stored byte order and memory order are.
//
// Imports: the standard library, zarr and zarr/blosc (the formats it
// writes), and the zstd of klauspost/compress and pierrec/lz4.
package writer
