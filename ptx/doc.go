// Package ptx holds the project's CUDA kernels: CUDA C sources (*.cu), the
// PTX that nvcc generates from them (committed, embedded with go:embed) and
// a stamp of the sources' hashes so that stale PTX is caught by a test.
//
// Run `go generate ./...` on a machine with nvcc to rebuild the PTX.
//
// Imports: the standard library and package cuda.
package ptx
