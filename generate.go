// Package damacy streams crops out of sharded zarr / OME-NGFF stores onto
// NVIDIA GPUs without cgo. The library lives in package pipeline; the
// command in cmd/damacy.
//
// `go generate ./...` rebuilds the embedded PTX (it needs nvcc).
package damacy

//go:generate go generate ./ptx
