package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// shareChildEnv marks the child process of TestGPUShareIPC.
const shareChildEnv = "DAMACY_TEST_SHARE_CHILD"

// TestGPUShareChild is the consumer process of TestGPUShareIPC. For each
// line "slot mem offset bytes ready file" on stdin it maps the slot (once),
// makes its stream wait on the slot's ready event, copies the batch to
// the host, compares it with the file, records its own interprocess event
// on the stream and answers "DONE <event handle>" (or "FAIL <why>").
func TestGPUShareChild(t *testing.T) {
	if os.Getenv(shareChildEnv) == "" {
		t.Skip("runs only as TestGPUShareIPC's child process")
	}
	e := cudatest.Executor(t)
	var s cuda.Stream
	mems := map[int]cuda.DevicePtr{}
	readies := map[int]cuda.Event{}
	dones := map[int]cuda.Event{}
	if err := e.Do(func() (err error) { s, err = cuda.NewStream(cuda.StreamNonBlocking); return err }); err != nil {
		t.Fatal(err)
	}
	consume := func(line string) (cuda.IPCEventHandle, error) {
		var slot int
		var memHex, readyHex, file string
		var off, n int64
		if _, err := fmt.Sscan(line, &slot, &memHex, &off, &n, &readyHex, &file); err != nil {
			return cuda.IPCEventHandle{}, err
		}
		var mem cuda.IPCMemHandle
		var ready cuda.IPCEventHandle
		if err := decodeHandle(mem.Reserved[:], memHex); err != nil {
			return cuda.IPCEventHandle{}, err
		}
		if err := decodeHandle(ready.Reserved[:], readyHex); err != nil {
			return cuda.IPCEventHandle{}, err
		}
		want, err := os.ReadFile(file)
		if err != nil {
			return cuda.IPCEventHandle{}, err
		}
		got := make([]byte, n)
		var h cuda.IPCEventHandle
		err = e.Do(func() error {
			if mems[slot] == 0 {
				p, err := cuda.OpenIPCMemHandle(mem, cuda.IPCMemLazyEnablePeerAccess)
				if err != nil {
					return err
				}
				mems[slot] = p
				if readies[slot], err = cuda.OpenIPCEventHandle(ready); err != nil {
					return err
				}
				if dones[slot], err = cuda.NewEvent(cuda.EventInterprocess | cuda.EventDisableTiming); err != nil {
					return err
				}
			}
			if err := s.WaitEvent(readies[slot]); err != nil {
				return err
			}
			if err := s.CopyDtoH(got, mems[slot]+cuda.DevicePtr(off)); err != nil {
				return err
			}
			if err := dones[slot].Record(s); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			var err error
			h, err = dones[slot].IPCHandle()
			return err
		})
		if err != nil {
			return cuda.IPCEventHandle{}, err
		}
		if !bytes.Equal(got, want) {
			return cuda.IPCEventHandle{}, fmt.Errorf("slot %d: %s", slot, firstDiff(got, want, 4))
		}
		return h, nil
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if h, err := consume(sc.Text()); err != nil {
			fmt.Printf("FAIL %v\n", err)
		} else {
			fmt.Printf("DONE %x\n", h.Reserved)
		}
	}
	err := e.Do(func() error {
		err := s.Synchronize()
		for slot := range mems {
			p := mems[slot]
			r, d := readies[slot], dones[slot]
			err = errors.Join(err, cuda.CloseIPCMemHandle(&p), r.Destroy(), d.Destroy())
		}
		return errors.Join(err, s.Destroy())
	})
	if err != nil {
		t.Fatal(err)
	}
}

func decodeHandle(dst []byte, s string) error {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(dst) {
		return fmt.Errorf("bad handle %q", s)
	}
	copy(dst, b)
	return nil
}

// TestGPUShareIPC pops CUDA-engine batches, shares them with a child
// process (this test binary) through Batch.Share's IPC handles, and has
// the child compare each with the host engine's batch. The child's own
// interprocess events come back and release the batches with
// ReleaseAfter, so slots are refilled only after the child's copies.
func TestGPUShareIPC(t *testing.T) {
	if os.Getenv(shareChildEnv) != "" {
		t.Skip("in the child")
	}
	cudatest.MustHaveGPU(t)
	ex := cudatest.Executor(t)
	dir := t.TempDir()
	sc := storeCase{name: "u16", spec: writer.Spec{Shape: []int64{40, 48, 36}, ChunkShape: []int64{8, 16, 12}, ShardShape: []int64{16, 16, 36},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3}}}
	seed := zarrtest.Seed(t)
	path := writeCase(t, dir, sc, seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	ext := []int{7, 9, 10}
	var samples []Sample
	for range 22 { // five batches of 4 and a ragged one of 2
		samples = append(samples, Sample{URI: path, Box: randomBox(rng, sc.spec.Shape, ext)})
	}
	pipe := func(device string) *Pipeline {
		p, err := New(Config{BatchSize: 4, SampleShape: ext, BatchSlots: 2, Device: device, HostBufferBytes: 32 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		pushAll(t, p, samples...)
		return p
	}
	host, gpu := pipe("cpu"), pipe("cuda")
	defer host.Close()
	opened := map[cuda.IPCEventHandle]cuda.Event{}
	defer func() {
		gpu.Close()
		ex.Do(func() error {
			for _, ev := range opened {
				ev.Destroy()
			}
			return nil
		})
	}()

	child := cudatest.StartChild(t, "TestGPUShareChild", shareChildEnv+"=1")
	handles := map[int]Shared{}
	ctx := context.Background()
	var failure string
	for got := 0; got < len(samples) && failure == ""; {
		hb, err := host.Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := gpu.Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := gb.Share()
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := handles[sh.Slot]; ok && (prev.Mem != sh.Mem || prev.Ready != sh.Ready || prev.Offset != sh.Offset) {
			t.Fatalf("slot %d: handles changed between batches", sh.Slot)
		}
		handles[sh.Slot] = sh
		if sh.Bytes != int64(len(hb.Bytes())) {
			t.Fatalf("Share().Bytes = %d, host batch of %d bytes", sh.Bytes, len(hb.Bytes()))
		}
		file := filepath.Join(dir, fmt.Sprint("batch", gb.Info().ID))
		if err := os.WriteFile(file, hb.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		child.Send("%d %x %d %d %x %s", sh.Slot, sh.Mem.Reserved, sh.Offset, sh.Bytes, sh.Ready.Reserved, file)
		r := child.Await("DONE ", "FAIL ")
		rest, ok := strings.CutPrefix(r, "DONE ")
		if !ok {
			failure = fmt.Sprintf("batch %d: child answered %q", gb.Info().ID, r)
			gb.Release()
			hb.Release()
			break
		}
		var h cuda.IPCEventHandle
		if err := decodeHandle(h.Reserved[:], rest); err != nil {
			t.Fatal(err)
		}
		ev, ok := opened[h]
		if !ok {
			err := ex.Do(func() (err error) { ev, err = cuda.OpenIPCEventHandle(h); return err })
			if err != nil {
				t.Fatal(err)
			}
			opened[h] = ev
		}
		gb.ReleaseAfter(ev)
		hb.Release()
		got += hb.Len()
	}
	if out, err := child.Finish(); failure != "" || err != nil {
		t.Fatalf("%s (child: %v)\n%s", failure, err, out)
	}
	t.Logf("a child process read %d CUDA batches through %d slots' IPC handles, equal to the host engine's", gpu.Stats().BatchesEmitted, len(handles))
}
