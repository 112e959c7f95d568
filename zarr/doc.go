// Package zarr is the host-side format layer: zarr v3 and v2 metadata,
// codecs and CPU decoders, sharding, chunk keys, fill values, OME-NGFF
// multiscales, a reference region reader and a writer.
//
// The pipeline plans and decodes with it, and its reference reader is the
// oracle both engines are tested against.
//
// Imports: the standard library and pure-Go codec libraries; never a GPU
// package.
package zarr
