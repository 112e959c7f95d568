package serve

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
)

// cudaClientEnv carries the array's path to TestServeCUDAClient.
const cudaClientEnv = "DAMACY_TEST_SERVE_CUDA_CLIENT"

// TestServeCUDAClient is the client process of TestServeCUDA, on the
// socket inherited as fd 3. It names its GPU by UUID, pops batches from
// the CUDA engine, maps each slot once through its IPC handle, waits on
// the slot's ready event on its own stream, copies the batch out and
// compares it with the reference reader, then releases the batch after an
// interprocess event of its own, recorded after the copy.
func TestServeCUDAClient(t *testing.T) {
	path := os.Getenv(cudaClientEnv)
	if path == "" {
		t.Skip("runs only as TestServeCUDA's child process")
	}
	f := os.NewFile(3, "socket")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &protoClient{t: t, conn: conn.(*net.UnixConn), early: map[int64]*protoMsg{}}
	defer conn.Close()
	ex := cudatest.Executor(t)
	uuid, err := ex.Device().UUID()
	if err != nil {
		t.Fatal(err)
	}
	arr, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostConfig()
	cfg["batch_size"], cfg["batch_slots"] = 4, 2
	cfg["host_buffer_bytes"], cfg["device_buffer_bytes"] = 16<<20, 4<<20
	h := mustOK(t, "hello", c.call("hello", map[string]any{"version": 1, "config": cfg, "device": map[string]any{"kind": "cuda", "uuid": uuid.String()}}))
	if h.Engine != "cuda" || h.Device == nil || h.Device["uuid"] != uuid.String() {
		t.Fatalf("hello: %+v, want the CUDA engine on %v", h, uuid)
	}
	fmt.Printf("SERVER-ORDINAL %v\n", h.Device["ordinal"])
	ext := []int64{6, 10, 9}
	boxes := randomBoxes(rand.New(rand.NewPCG(7, 8)), 19, arr.Shape(), ext) // four batches of 4 and one of 3
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes)}))
	mustOK(t, "flush", c.call("flush", nil))

	type slotMap struct {
		mem          cuda.DevicePtr
		ready, done  cuda.Event
		memH, readyH string
	}
	slots := map[int]*slotMap{}
	var s cuda.Stream
	do := func(f func() error) {
		t.Helper()
		if err := ex.Do(f); err != nil {
			t.Fatal(err)
		}
	}
	do(func() (err error) { s, err = cuda.NewStream(cuda.StreamNonBlocking); return err })
	handle := func(dst []byte, h string) {
		t.Helper()
		if b, err := hex.DecodeString(h); err != nil || len(b) != len(dst) {
			t.Fatalf("bad handle %q", h)
		} else {
			copy(dst, b)
		}
	}
	per := 4 * ext[0] * ext[1] * ext[2]
	for got := 0; got < len(boxes); {
		b := mustOK(t, "pop", c.call("pop", nil)).Batch
		if b == nil || b.CUDA == nil || b.Host != nil || b.N != min(4, len(boxes)-got) || b.NBytes != int64(b.N)*per {
			t.Fatalf("pop: %+v", b)
		}
		m := slots[b.Slot]
		if m == nil {
			m = &slotMap{memH: b.CUDA.MemHandle, readyH: b.CUDA.EventHandle}
			var mh cuda.IPCMemHandle
			var rh cuda.IPCEventHandle
			handle(mh.Reserved[:], m.memH)
			handle(rh.Reserved[:], m.readyH)
			do(func() (err error) {
				if m.mem, err = cuda.OpenIPCMemHandle(mh, cuda.IPCMemLazyEnablePeerAccess); err != nil {
					return err
				}
				if m.ready, err = cuda.OpenIPCEventHandle(rh); err != nil {
					return err
				}
				m.done, err = cuda.NewEvent(cuda.EventInterprocess | cuda.EventDisableTiming)
				return err
			})
			slots[b.Slot] = m
		} else if m.memH != b.CUDA.MemHandle || m.readyH != b.CUDA.EventHandle {
			t.Fatalf("slot %d: its handles changed", b.Slot)
		}
		data := make([]byte, b.NBytes)
		var doneH cuda.IPCEventHandle
		do(func() error {
			if err := s.WaitEvent(m.ready); err != nil {
				return err
			}
			if err := s.CopyDtoH(data, m.mem+cuda.DevicePtr(b.CUDA.Offset)); err != nil {
				return err
			}
			if err := m.done.Record(s); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			var err error
			doneH, err = m.done.IPCHandle()
			return err
		})
		for i := range b.N {
			if want := wantF32(t, arr, boxes[got+i]); !bytes.Equal(data[int64(i)*per:int64(i+1)*per], want) {
				t.Fatalf("batch %d sample %d: differs from the reference reader", b.ID, i)
			}
		}
		c.send(map[string]any{"op": "release", "batch": b.ID, "event_handle": hex.EncodeToString(doneH.Reserved[:])})
		got += b.N
	}
	st := mustOK(t, "stats", c.call("stats", nil)).Stats
	if st.Engine != "cuda" || st.BatchesEmitted != 5 || st.H2D.Count == 0 {
		t.Errorf("stats %+v", st)
	}
	// Unmap before close: the server frees the slots when it closes.
	do(func() error {
		errs := []error{s.Synchronize()}
		for _, m := range slots {
			errs = append(errs, cuda.CloseIPCMemHandle(&m.mem), m.ready.Destroy(), m.done.Destroy())
		}
		return errors.Join(append(errs, s.Destroy())...)
	})
	mustOK(t, "close", c.call("close", nil))
}

// TestServeCUDA serves the CUDA engine in this process to a client in a
// child process (this test binary) that reads the batches through CUDA
// IPC. With two GPUs or more, the child sees only the last one, so the
// server must find it by UUID at another ordinal.
func TestServeCUDA(t *testing.T) {
	if os.Getenv(cudaClientEnv) != "" {
		t.Skip("in the child")
	}
	cudatest.MustHaveGPU(t)
	path, _ := testArray(t, t.TempDir())
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	wantOrdinal := "0"
	env := append(os.Environ(), cudaClientEnv+"="+path)
	if _, set := os.LookupEnv("CUDA_VISIBLE_DEVICES"); !set && n > 1 {
		wantOrdinal = fmt.Sprint(n - 1)
		env = append(env, "CUDA_VISIBLE_DEVICES="+wantOrdinal)
	}
	before := runtime.NumGoroutine()
	client, server := socketpair(t)
	sc, err := net.FileConn(server)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), sc.(*net.UnixConn), Options{}) }()
	cf, err := client.File()
	if err != nil {
		t.Fatal(err)
	}
	client.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeCUDAClient$", "-test.v", "-test.count=1")
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{cf}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	cf.Close()
	server.Close()
	if err != nil || !strings.Contains(out.String(), "--- PASS: TestServeCUDAClient") {
		t.Fatalf("client process: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "SERVER-ORDINAL "+wantOrdinal+"\n") {
		t.Errorf("the server did not pick device %s:\n%s", wantOrdinal, out.String())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not return after close")
	}
	waitGoroutines(t, before)
	t.Logf("a client process read 5 CUDA batches through IPC handles (server on device %s)", wantOrdinal)
}
