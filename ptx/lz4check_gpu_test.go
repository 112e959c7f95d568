package ptx

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/nvcomp"
)

// lz4TestBlocks returns LZ4 blocks with the sizes they are checked
// against: pierrec's output for smooth, noisy and random data (exact, one
// byte short and long), truncations, bit flips, overwritten bytes, and
// hand-made sequences near the end-of-block rules.
func lz4TestBlocks(r *rand.Rand) (blocks [][]byte, wants []int) {
	add := func(b []byte, want int) {
		blocks, wants = append(blocks, b), append(wants, want)
	}
	for range 400 {
		size := 1 + r.IntN(1<<r.IntN(18))
		src := make([]byte, size)
		noise := r.IntN(9)
		for i := range src {
			src[i] = byte(i/(1+r.IntN(64))) ^ byte(r.IntN(1<<noise))
		}
		dst := make([]byte, lz4.CompressBlockBound(size))
		var n int
		var err error
		if r.IntN(2) == 0 {
			var c lz4.Compressor
			n, err = c.CompressBlock(src, dst)
		} else {
			c := lz4.CompressorHC{Level: lz4.Level9}
			n, err = c.CompressBlock(src, dst)
		}
		if err != nil || n == 0 {
			continue // incompressible: pierrec writes no block
		}
		block := dst[:n]
		add(block, size)
		add(block, size-1)
		add(block, size+1)
		add(block[:r.IntN(n)], size)
		flipped := append([]byte(nil), block...)
		flipped[r.IntN(n)] ^= 1 << r.IntN(8)
		add(flipped, size)
		smashed := append([]byte(nil), block...)
		for range 1 + r.IntN(4) {
			smashed[r.IntN(n)] = byte(r.Uint32())
		}
		add(smashed, size)
	}
	for range 2000 {
		b := make([]byte, 1+r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		add(b, 1+r.IntN(200))
	}
	// Literals, a match near the end, final literals: around the rules
	// (the last match starts 12 bytes before the end, the last 5 bytes
	// are literals).
	for lit := 1; lit < 20; lit++ {
		for ml := 4; ml < 24; ml++ {
			for tail := 0; tail < 8; tail++ {
				b := []byte{byte(min(lit, 15)<<4 | min(ml-4, 15))}
				if lit >= 15 {
					b = append(b, byte(lit-15))
				}
				for i := range lit {
					b = append(b, byte('a'+i%3))
				}
				b = append(b, 1, 0)
				if ml-4 >= 15 {
					b = append(b, byte(ml-4-15))
				}
				b = append(b, byte(tail<<4))
				for range tail {
					b = append(b, 'z')
				}
				add(b, lit+ml+tail)
			}
		}
	}
	return blocks, wants
}

// TestLZ4CheckGPU checks the LZ4 check kernel against its host twin,
// nvcomp.LZ4GPUCheck, block by block: a block passes on the GPU (its
// address and length untouched) exactly when it passes on the host, and a
// failing block's entry becomes the empty block with length 1.
func TestLZ4CheckGPU(t *testing.T) {
	e, k := gpuKernels(t)
	blocks, wants := lz4TestBlocks(newRand(t))
	n := len(blocks)
	var data []byte
	offs := make([]int, n)
	for i, b := range blocks {
		offs[i] = len(data)
		data = append(data, b...)
	}
	pass := 0
	gotPtrs, gotLens := make([]byte, 8*n), make([]byte, 8*n)
	var base, empty cuda.DevicePtr
	err := e.Do(func() (err error) {
		var bufs deviceBuffers
		defer func() { err = errors.Join(err, bufs.free()) }()
		if base, err = bufs.upload(data); err != nil {
			return err
		}
		if empty, err = bufs.upload([]byte{0}); err != nil {
			return err
		}
		ptrs, lens, exp := make([]uint64, n), make([]uint64, n), make([]uint64, n)
		for i := range n {
			ptrs[i], lens[i], exp[i] = uint64(base)+uint64(offs[i]), uint64(len(blocks[i])), uint64(wants[i])
		}
		dPtrs, err := bufs.upload(u64Bytes(ptrs))
		if err != nil {
			return err
		}
		dLens, err := bufs.upload(u64Bytes(lens))
		if err != nil {
			return err
		}
		dExp, err := bufs.upload(u64Bytes(exp))
		if err != nil {
			return err
		}
		if err := k.LZ4Check(0, dPtrs, dLens, dExp, n, empty); err != nil {
			return err
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
		if err := cuda.CopyDtoH(gotPtrs, dPtrs); err != nil {
			return err
		}
		return cuda.CopyDtoH(gotLens, dLens)
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range n {
		ptr, ln := binary.NativeEndian.Uint64(gotPtrs[8*i:]), binary.NativeEndian.Uint64(gotLens[8*i:])
		hostErr := nvcomp.LZ4GPUCheck(blocks[i], wants[i])
		gpuPass := ptr == uint64(base)+uint64(offs[i]) && ln == uint64(len(blocks[i]))
		gpuFail := ptr == uint64(empty) && ln == 1
		switch {
		case hostErr == nil && gpuPass:
			pass++
		case hostErr != nil && gpuFail:
		default:
			bad++
			if bad <= 10 {
				t.Errorf("block %d (%d bytes, want %d): host %v; GPU entry %#x/%d (block %#x, empty %#x)", i, len(blocks[i]), wants[i], hostErr, ptr, ln, uint64(base)+uint64(offs[i]), empty)
			}
		}
	}
	t.Logf("%d blocks, %d pass, %d fail, %d disagree", n, pass, n-pass-bad, bad)
	if pass == 0 || pass == n {
		t.Errorf("%d of %d blocks pass: the test needs both kinds", pass, n)
	}
}
