//go:build linux && (amd64 || arm64)

package pipeline

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// TestHostShare maps each popped batch's memfd a second time, as another
// process would, and compares it with the batch; the memfds are closed
// once the pipeline is closed and every batch released.
func TestHostShare(t *testing.T) {
	dir := t.TempDir()
	sc := storeCase{name: "u16", spec: writer.Spec{Shape: []int64{40, 50}, ChunkShape: []int64{8, 16}, ShardShape: []int64{16, 32},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}}
	path := writeCase(t, dir, sc, 3)
	cfg := Config{BatchSize: 3, SampleShape: []int{9, 13}, BatchSlots: 3, Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20,
		MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	var samples []Sample
	for range 8 { // two full batches and a ragged one of 2
		samples = append(samples, Sample{URI: path, Box: randomBox(rng, sc.spec.Shape, cfg.SampleShape)})
	}
	pushAll(t, p, samples...)
	maps := map[int][]byte{}
	fds := map[int]int{}
	var held []*Batch
	for got := 0; got < len(samples); {
		b, err := p.Pop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sh, err := b.Share()
		if err != nil {
			t.Fatal(err)
		}
		if sh.FD < 0 || sh.Slot < 0 || sh.Slot >= cfg.BatchSlots || sh.Offset != 0 {
			t.Fatalf("Share() = %+v", sh)
		}
		if want := int64(len(b.Bytes())); sh.Bytes != want || sh.Size != int64(cfg.BatchSize)*want/int64(b.Len()) {
			t.Fatalf("Share() = %+v for a batch of %d bytes", sh, want)
		}
		if fd, ok := fds[sh.Slot]; ok && fd != sh.FD {
			t.Fatalf("slot %d: fd %d, then %d", sh.Slot, fd, sh.FD)
		}
		fds[sh.Slot] = sh.FD
		m := maps[sh.Slot]
		if m == nil {
			if m, err = syscall.Mmap(sh.FD, 0, int(sh.Size), syscall.PROT_READ, syscall.MAP_SHARED); err != nil {
				t.Fatal(err)
			}
			maps[sh.Slot] = m
		}
		if !bytes.Equal(m[sh.Offset:sh.Offset+sh.Bytes], b.Bytes()) {
			t.Fatalf("batch %d: the second mapping differs from Bytes()", b.Info().ID)
		}
		got += b.Len()
		held = append(held, b)
		if len(held) == cfg.BatchSlots-1 {
			for _, h := range held {
				h.Release()
			}
			held = nil
		}
	}
	last, err := held[0].Share()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// A held batch keeps its slot's memfd open (and mapped) past Close.
	if _, err := fcntlGetfd(last.FD); err != nil {
		t.Fatalf("fd %d closed while its batch is held: %v", last.FD, err)
	}
	if !bytes.Equal(maps[last.Slot][:last.Bytes], held[0].Bytes()) {
		t.Fatal("a held batch changed at Close")
	}
	for _, h := range held {
		h.Release()
	}
	if _, err := held[0].Share(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Share after Release: %v, want ErrInvalid", err)
	}
	for slot, fd := range fds {
		if _, err := fcntlGetfd(fd); err != syscall.EBADF {
			t.Errorf("slot %d: fd %d still open after Close and Release (%v)", slot, fd, err)
		}
	}
	for _, m := range maps {
		syscall.Munmap(m)
	}
}

func fcntlGetfd(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}
