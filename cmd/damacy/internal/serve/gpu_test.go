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
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
)

// cudaClientEnv carries the array's path to TestServeCUDAClient.
const cudaClientEnv = "DAMACY_TEST_SERVE_CUDA_CLIENT"

// ipcFiles lists the files the CUDA driver made in /dev/shm for the
// interprocess events of process pid (the form cuda.RemoveIPCFiles
// removes, spelled out here again: cuda.shm.<uid>.<pid in hex>.<n>).
func ipcFiles(t testing.TB, pid int) []string {
	t.Helper()
	names, err := filepath.Glob(fmt.Sprintf("/dev/shm/cuda.shm.%d.%x.*", os.Getuid(), pid))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// cudaReader reads CUDA batches of a server in another process as the
// Python client does: each slot's memory, ready event and done event are
// opened once from their handles (opening makes no file in /dev/shm); a
// batch is copied on the reader's stream after the ready event, the done
// event is recorded after the copy and the batch released with "done"
// before the copy is waited for, so that a refill of the slot that did not
// wait for the done event could overwrite it.
type cudaReader struct {
	t     testing.TB
	ex    *cuda.Executor
	s     cuda.Stream
	slots map[int]*cudaSlotMap
}

// cudaSlotMap is a slot as the reader opened it, with the handles it
// came with (fixed per slot).
type cudaSlotMap struct {
	mem         cuda.DevicePtr
	ready, done cuda.Event
	handles     cudaSlot
}

func newCUDAReader(t testing.TB, ex *cuda.Executor) *cudaReader {
	r := &cudaReader{t: t, ex: ex, slots: map[int]*cudaSlotMap{}}
	r.do(func() (err error) { r.s, err = cuda.NewStream(cuda.StreamNonBlocking); return err })
	return r
}

func (r *cudaReader) do(f func() error) {
	r.t.Helper()
	if err := r.ex.Do(f); err != nil {
		r.t.Fatal(err)
	}
}

func decodeHandle(t testing.TB, dst []byte, h string) {
	t.Helper()
	if b, err := hex.DecodeString(h); err != nil || len(b) != len(dst) {
		t.Fatalf("bad handle %q", h)
	} else {
		copy(dst, b)
	}
}

// read copies batch b out of its slot and releases it (with "done") on c.
func (r *cudaReader) read(c *protoClient, b *batchMsg) []byte {
	r.t.Helper()
	if b.CUDA == nil || b.CUDA.DoneHandle == "" {
		r.t.Fatalf("a CUDA batch without its handles: %+v", b)
	}
	m := r.slots[b.Slot]
	if m == nil {
		m = &cudaSlotMap{handles: *b.CUDA}
		var mh cuda.IPCMemHandle
		var rh, dh cuda.IPCEventHandle
		decodeHandle(r.t, mh.Reserved[:], b.CUDA.MemHandle)
		decodeHandle(r.t, rh.Reserved[:], b.CUDA.EventHandle)
		decodeHandle(r.t, dh.Reserved[:], b.CUDA.DoneHandle)
		r.do(func() (err error) {
			if m.mem, err = cuda.OpenIPCMemHandle(mh, cuda.IPCMemLazyEnablePeerAccess); err != nil {
				return err
			}
			if m.ready, err = cuda.OpenIPCEventHandle(rh); err != nil {
				return err
			}
			m.done, err = cuda.OpenIPCEventHandle(dh)
			return err
		})
		r.slots[b.Slot] = m
	} else if h := *b.CUDA; h.MemHandle != m.handles.MemHandle || h.EventHandle != m.handles.EventHandle || h.DoneHandle != m.handles.DoneHandle {
		r.t.Fatalf("slot %d: its handles changed", b.Slot)
	}
	var dev cuda.DevicePtr
	data := make([]byte, b.NBytes)
	r.do(func() (err error) {
		if dev, err = cuda.MemAlloc(int(b.NBytes)); err != nil {
			return err
		}
		if err := r.s.WaitEvent(m.ready); err != nil {
			return err
		}
		if err := r.s.CopyDtoD(dev, m.mem+cuda.DevicePtr(b.CUDA.Offset), int(b.NBytes)); err != nil {
			return err
		}
		return m.done.Record(r.s)
	})
	c.send(map[string]any{"op": "release", "batch": b.ID, "done": true})
	r.do(func() error {
		if err := r.s.CopyDtoH(data, dev); err != nil {
			return err
		}
		return errors.Join(r.s.Synchronize(), dev.Free())
	})
	return data
}

// close unmaps the slots; do it before the server frees them at close.
func (r *cudaReader) close() {
	r.do(func() error {
		errs := []error{r.s.Synchronize()}
		for _, m := range r.slots {
			errs = append(errs, cuda.CloseIPCMemHandle(&m.mem), m.ready.Destroy(), m.done.Destroy())
		}
		return errors.Join(append(errs, r.s.Destroy())...)
	})
}

// popCUDA pushes boxes, flushes and reads every batch through r, checking
// each against the reference reader; batches hold up to per samples.
func popCUDA(t testing.TB, c *protoClient, r *cudaReader, arr *zarr.Array, path string, boxes [][][2]int64, per int) {
	t.Helper()
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes)}))
	mustOK(t, "flush", c.call("flush", nil))
	for got := 0; got < len(boxes); {
		b := mustOK(t, "pop", c.call("pop", nil)).Batch
		if b == nil || b.CUDA == nil || b.Host != nil || b.N != min(per, len(boxes)-got) {
			t.Fatalf("pop: %+v", b)
		}
		data := r.read(c, b)
		sample := len(data) / b.N
		for i := range b.N {
			if want := wantF32(t, arr, boxes[got+i]); !bytes.Equal(data[i*sample:(i+1)*sample], want) {
				t.Fatalf("batch %d sample %d: differs from the reference reader", b.ID, i)
			}
		}
		got += b.N
	}
}

// cudaHello is hello for the CUDA engine on the GPU named uuid.
func cudaHello(uuid cuda.UUID) map[string]any {
	cfg := hostConfig()
	cfg["batch_size"], cfg["batch_slots"] = 4, 2
	cfg["host_buffer_bytes"], cfg["device_buffer_bytes"] = 16<<20, 4<<20
	return map[string]any{"version": protocolVersion, "config": cfg, "device": map[string]any{"kind": "cuda", "uuid": uuid.String()}}
}

// TestServeCUDAClient is the client process of TestServeCUDA, on the
// socket inherited as fd 3. It names its GPU by UUID and reads five
// batches of the CUDA engine through a cudaReader. It makes no
// interprocess event, so the driver made no file in /dev/shm for it.
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
	h := mustOK(t, "hello", c.call("hello", cudaHello(uuid)))
	if h.Engine != "cuda" || h.Device == nil || h.Device["uuid"] != uuid.String() {
		t.Fatalf("hello: %+v, want the CUDA engine on %v", h, uuid)
	}
	fmt.Printf("SERVER-ORDINAL %v\n", h.Device["ordinal"])
	r := newCUDAReader(t, ex)
	boxes := randomBoxes(rand.New(rand.NewPCG(7, 8)), 19, arr.Shape(), []int64{6, 10, 9}) // four batches of 4 and one of 3
	popCUDA(t, c, r, arr, path, boxes, 4)
	st := mustOK(t, "stats", c.call("stats", nil)).Stats
	if st.Engine != "cuda" || st.BatchesEmitted != 5 || st.H2D.Count == 0 {
		t.Errorf("stats %+v", st)
	}
	r.close()
	mustOK(t, "close", c.call("close", nil))
	if files := ipcFiles(t, os.Getpid()); len(files) > 0 {
		t.Errorf("the client made interprocess events: %q", files)
	}
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

// TestServeCUDAFiles runs CUDA servers as processes (as `damacy serve`)
// and reads their batches here: while a server runs, the driver has made
// a file in /dev/shm for its done events, of the form RemoveIPCFiles
// removes; none is left once it exited on close or on SIGTERM. A server
// killed by SIGKILL leaves its file, which cuda.RemoveIPCFiles (what the
// client does then) removes. This process, a client, makes no file.
func TestServeCUDAFiles(t *testing.T) {
	ex := cudatest.Executor(t)
	uuid, err := ex.Device().UUID()
	if err != nil {
		t.Fatal(err)
	}
	path, arr := testArray(t, t.TempDir())
	mine := len(ipcFiles(t, os.Getpid()))
	for _, how := range []string{"close", "SIGTERM", "SIGKILL"} {
		sp := startServer(t, serveParentEnv+"="+strconv.Itoa(os.Getpid()))
		c := sp.c
		pid := sp.cmd.Process.Pid
		mustOK(t, "hello", c.call("hello", cudaHello(uuid)))
		r := newCUDAReader(t, ex)
		popCUDA(t, c, r, arr, path, randomBoxes(rand.New(rand.NewPCG(9, 10)), 9, arr.Shape(), []int64{6, 10, 9}), 4)
		files := ipcFiles(t, pid)
		if len(files) == 0 {
			all, _ := filepath.Glob("/dev/shm/cuda.shm.*")
			t.Fatalf("%s: the server (pid %d, %x) made done events, yet /dev/shm has no file of the form cuda.RemoveIPCFiles removes; it has %q", how, pid, pid, all)
		}
		r.close()
		want := 0
		switch how {
		case "close":
			mustOK(t, "close", c.call("close", nil))
			c.conn.Close()
			want = 0
		case "SIGTERM":
			sp.cmd.Process.Signal(syscall.SIGTERM)
			if m := c.closing(); m.Status != statusShutdown || !strings.Contains(m.Reason, "SIGTERM") {
				t.Errorf("SIGTERM: closing %+v", m)
			}
			want = 1
		case "SIGKILL":
			sp.cmd.Process.Kill()
			want = -1
		}
		if code := sp.wait(t); code != want {
			t.Errorf("%s: server exit %d, want %d; output:\n%s", how, code, want, sp.stderr.String())
		}
		if how == "SIGKILL" {
			if left := ipcFiles(t, pid); len(left) == 0 {
				t.Errorf("SIGKILL: the server's files %q went with it (the driver cleaned up after all?)", files)
			}
			if err := cuda.RemoveIPCFiles(pid); err != nil {
				t.Error(err)
			}
		}
		if left := ipcFiles(t, pid); len(left) > 0 {
			t.Errorf("%s: the server left %q", how, left)
		}
	}
	if n := len(ipcFiles(t, os.Getpid())); n != mine {
		t.Errorf("this process, a client, had %d files in /dev/shm, now %d", mine, n)
	}
}
