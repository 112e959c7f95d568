// Package cpu reports the CPU features the module's assembly needs: for
// now, whether the CPU and the OS support AVX2. It asks once, at start-up;
// the answer is read-only after.
//
// It is internal to the module. Package ptx (the host twin's row loops)
// and package zarr/blosc (the bit and byte unshuffles) choose their AVX2
// kernels with it. Built with the purego tag, or for an architecture other
// than amd64, it reports no feature, and they run their Go loops.
//
// Imports: nothing.
package cpu
