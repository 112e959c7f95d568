package pipeline

import (
	"errors"
	"sync"

	"github.com/damacy-go/damacy/cuda"
)

// Shared is what another process on the same host needs to use a popped
// batch in place (see Batch.Share). Everything but Bytes is fixed per
// slot, so a consumer maps each Slot once and keeps the mapping.
type Shared struct {
	Slot   int   // the batch slot, 0 ≤ Slot < Config.BatchSlots
	Offset int64 // where the batch starts in the slot's memory
	Bytes  int64 // the batch's length: the elements of Info().Shape times the dtype's size
	Size   int64 // the size of the slot's memory (the whole allocation, or the file)

	// CUDA engine: Mem maps the slot's allocation (cuIpcOpenMemHandle);
	// Ready is the slot's interprocess event, recorded by Share after the
	// batch was assembled: the consumer's stream waits on it before
	// reading.
	Mem   cuda.IPCMemHandle
	Ready cuda.IPCEventHandle

	// Host engine: FD is a memfd of Size bytes that holds the slot (map
	// it shared); -1 on the CUDA engine. It belongs to the pipeline and
	// stays open until the slot is freed at Close: send or dup it while
	// the batch is held.
	FD int
}

// slotShare caches a slot's Shared fields: the memfd of a host slot, set
// when the slot is made; the IPC handles of a CUDA slot and its
// interprocess ready event, made on the first Share. Only a shared slot
// has an interprocess event: the driver gives each process that makes one
// a file in /dev/shm, removed only when its context is destroyed.
type slotShare struct {
	fd     int // host engine: the memfd behind slot.host, -1 when none
	once   sync.Once
	err    error
	offset int64 // CUDA engine: slot.dev within its allocation
	size   int64
	mem    cuda.IPCMemHandle
	event  cuda.Event // interprocess; recorded by each Share after slot.readyEvent
	ready  cuda.IPCEventHandle
}

// Share returns what another process on this host needs to use the batch
// without a copy: IPC handles of the slot's device memory and ready event
// (CUDA engine), or the memfd that holds the slot (host engine). The
// batch must stay held (not Released) while the other process reads it;
// the other process must not write it.
//
// It fails with ErrInvalid after Release or where host slots have no
// memfd (outside Linux on amd64 and arm64), and with ErrCUDA where the
// driver does not share memory or events between processes.
func (b *Batch) Share() (Shared, error) { return b.tensors[0].Share() }

// Share returns what another process needs to use the tensor in place, as
// Batch.Share does for the first tensor. Slot numbers are per source.
func (t *Tensor) Share() (Shared, error) {
	if t.b.released.Load() {
		return Shared{}, newError("share", ErrInvalid, "", errors.New("batch already released"))
	}
	s := t.slot
	sh := Shared{Slot: s.index, Bytes: s.bytes(t.b.Len()), Size: s.bytes(int(s.shape[0])), FD: -1}
	if s.host != nil {
		if s.share.fd < 0 {
			return Shared{}, newError("share", ErrInvalid, "", errors.New("host batch slots are not shared memory on this platform"))
		}
		sh.FD = s.share.fd
		return sh, nil
	}
	s.share.once.Do(func() { s.share.err = s.gpu.ex.Do(s.exportIPC) })
	if s.share.err != nil {
		return Shared{}, cudaError("share", s.share.err)
	}
	if err := s.gpu.ex.Do(s.markShared); err != nil {
		return Shared{}, cudaError("share", err)
	}
	sh.Offset, sh.Size = s.share.offset, s.share.size
	sh.Mem, sh.Ready = s.share.mem, s.share.ready
	return sh, nil
}

// exportIPC makes a CUDA slot's IPC handles and its interprocess ready
// event (and the engine's share stream, the first time); it runs once per
// slot, on the engine's executor. The memory handle covers the whole
// allocation, so the slot's offset in it goes along.
func (s *slot) exportIPC() error {
	p := cuda.DevicePtr(s.dev)
	a, err := p.Attributes()
	if err != nil {
		return err
	}
	mem, err := a.Start.IPCHandle()
	if err != nil {
		return err
	}
	e := s.gpu
	if e.shareS == 0 {
		if e.shareS, err = cuda.NewStream(cuda.StreamNonBlocking); err != nil {
			return err
		}
	}
	if s.share.event, err = cuda.NewEvent(cuda.EventDisableTiming | cuda.EventInterprocess); err != nil {
		return err
	}
	ready, err := s.share.event.IPCHandle()
	if err != nil {
		return err
	}
	s.share.offset, s.share.size = int64(p-a.Start), int64(a.Size)
	s.share.mem, s.share.ready = mem, ready
	return nil
}

// markShared records the slot's interprocess ready event once the batch's
// own ready event has passed, on the share stream (the assemble stream may
// hold later batches' work already); it runs on the engine's executor.
func (s *slot) markShared() error {
	st := s.gpu.shareS
	if err := st.WaitEvent(s.readyEvent); err != nil {
		return err
	}
	return s.share.event.Record(st)
}
