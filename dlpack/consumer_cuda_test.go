package dlpack

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/dlpack/internal/pyembed"
)

// streamWaiter is the Waiter a producer builds over package cuda: an event
// recorded on its stream, waited for by the consumer's stream.
type streamWaiter struct {
	ex       *cuda.Executor
	producer cuda.Stream
	ev       cuda.Event
}

func (w *streamWaiter) WaitStream(s uintptr) error {
	return w.ex.Do(func() error {
		if err := w.ev.Record(w.producer); err != nil {
			return err
		}
		return cuda.Stream(s).WaitEvent(w.ev)
	})
}

func (w *streamWaiter) WaitHost() error {
	return w.ex.Do(w.producer.Synchronize)
}

// gateCycles is how long the gate kernel spins: about half a second at
// the 2 GHz clocks of current data-centre GPUs, far longer than the
// milliseconds the consumer needs to start reading.
const gateCycles = 1_000_000_000

// cudaFixture is what the device tests share: the interpreter with torch,
// an executor for device 0, and the producer's stream.
type cudaFixture struct {
	in *pyembed.Interpreter
	ex *cuda.Executor
	w  *streamWaiter
}

func newCUDAFixture(t *testing.T) *cudaFixture {
	t.Helper()
	in := consumer(t)
	pyembed.MustImport(t, in, "torch", false)
	ex := cudatest.Executor(t)
	if ok, err := in.Eval("torch.cuda.is_available()"); err != nil || ok != "True" {
		t.Skipf("torch has no CUDA (%s, %v)", ok, err)
	}
	if err := in.Exec("import contextlib\ntorch.cuda.init()"); err != nil {
		t.Fatal(err)
	}
	w := &streamWaiter{ex: ex}
	err := ex.Do(func() (err error) {
		if w.producer, err = cuda.NewStream(cuda.StreamNonBlocking); err != nil {
			return err
		}
		w.ev, err = cuda.NewEvent(cuda.EventDisableTiming)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ex.Do(func() error { w.ev.Destroy(); return w.producer.Destroy() })
	})
	return &cudaFixture{in: in, ex: ex, w: w}
}

// consumerStream makes torch's stream s, the current one or a new one,
// and returns its value as torch.from_dlpack passes it to __dlpack__.
func (f *cudaFixture) consumerStream(t *testing.T, side bool) int64 {
	t.Helper()
	code := "s = torch.cuda.current_stream()"
	if side {
		code = "s = torch.cuda.Stream()"
	}
	if err := f.in.Exec(code); err != nil {
		t.Fatal(err)
	}
	v, err := f.in.Eval("1 if s.cuda_stream == 0 else s.cuda_stream")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// produce allocates device memory for data, fills it with NaN bytes
// (0xff) and returns it, with the copy of data queued on the producer's
// stream behind a gate: a torch kernel that spins for gateCycles on a
// stream of its own. The host does not wait; until the gate opens, the
// memory holds only NaNs. The memory is freed when the test ends.
func (f *cudaFixture) produce(t *testing.T, data []byte) cuda.DevicePtr {
	t.Helper()
	var dptr cuda.DevicePtr
	var host *cuda.HostBuffer
	err := f.ex.Do(func() (err error) {
		if dptr, err = cuda.MemAlloc(len(data)); err != nil {
			return err
		}
		if err := cuda.MemsetD8(dptr, 0xff, len(data)); err != nil {
			return err
		}
		if host, err = cuda.HostAlloc(len(data), 0); err != nil {
			return err
		}
		copy(host.Bytes(), data)
		return cuda.Synchronize() // the NaNs are in place before any gate
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.ex.Do(func() error {
			if err := f.w.producer.Synchronize(); err != nil {
				return err
			}
			host.Free()
			return dptr.Free()
		})
	})
	err = f.in.Exec(fmt.Sprintf("gate = torch.cuda.Stream()\nwith torch.cuda.stream(gate):\n    torch.cuda._sleep(%d)", gateCycles))
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.in.Eval("gate.cuda_stream")
	if err != nil {
		t.Fatal(err)
	}
	gate, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	err = f.ex.Do(func() error {
		opened, err := cuda.NewEvent(cuda.EventDisableTiming)
		if err != nil {
			return err
		}
		defer opened.Destroy()
		if err := opened.Record(cuda.Stream(gate)); err != nil {
			return err
		}
		if err := f.w.producer.WaitEvent(opened); err != nil {
			return err
		}
		return f.w.producer.CopyHtoD(dptr, host.Bytes())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dptr
}

var torchCUDACases = []torchCase{
	{"float32", Versioned, true, true},
	{"bfloat16", Versioned, false, false},
	{"float32", Legacy, false, true},
	{"bfloat16", Legacy, true, false},
}

// TestTorchConsumerCUDA hands device exports to torch.from_dlpack on
// cuda:0, on torch's default stream and on a side stream. The data is
// still behind the gate when torch starts: only the stream handshake
// orders torch's reads after the producer's copy. After the deleter ran,
// the producer orders its read-back after the consumer's stream, as an
// owner reusing the memory must.
func TestTorchConsumerCUDA(t *testing.T) {
	f := newCUDAFixture(t)
	r := newRand(t)
	for _, tc := range torchCUDACases {
		t.Run(tc.String(), func(t *testing.T) {
			shape := []int64{8 + r.Int64N(8), 1024, 1024 + r.Int64N(64)}
			size := int(dtypeOf(tc.dtype).Bits / 8)
			want := randomElements(r, tc.dtype, numel(shape))
			path := writeExpected(t, want)
			stream := f.consumerStream(t, tc.side)
			dptr := f.produce(t, want)

			var o countOwner
			d := Desc{Data: uintptr(dptr), Device: Device{Type: CUDA}, DType: dtypeOf(tc.dtype), Shape: shape}
			m, err := Export(d, tc.format, &o)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Delete()
			if err := Synchronize(d.Device, stream, f.w); err != nil {
				t.Fatal(err)
			}
			consumeTorch(t, f.in, m, tc, d, fmt.Sprint(stream), path)
			checkLive(t, "torch holds the tensor", m, &o, 0)

			err = f.in.Exec(fmt.Sprintf("with (torch.cuda.stream(s) if %s else contextlib.nullcontext()):\n    t.neg_()\n    v = t[1:]\ndel t\ncollect()", pyBool(tc.side)))
			if err != nil {
				t.Fatal(err)
			}
			checkLive(t, "a view of the tensor remains", m, &o, 0)
			if err := f.in.Exec("del v\ncollect()"); err != nil {
				t.Fatal(err)
			}
			checkLive(t, "after del and gc.collect", m, &o, 1)

			// Reuse after the consumer: order the read-back after its stream.
			got := make([]byte, len(want))
			err = f.ex.Do(func() error {
				done, err := cuda.NewEvent(cuda.EventDisableTiming)
				if err != nil {
					return err
				}
				defer done.Destroy()
				if err := done.Record(cuda.Stream(stream)); err != nil {
					return err
				}
				if err := done.Synchronize(); err != nil {
					return err
				}
				return cuda.CopyDtoH(got, dptr)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, negated(want, size)) {
				t.Fatalf("torch's in-place negation is not in the exported device memory")
			}
			if err := f.in.Exec("del s, gate"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTorchConsumerCUDANoSync is the control for TestTorchConsumerCUDA:
// a consumer that asks for no synchronization (stream -1) reads the
// memory before the gated copy, and sees only the NaN bytes. It shows that
// the gate holds the data back long enough for the handshake test to fail
// if the handshake did nothing.
func TestTorchConsumerCUDANoSync(t *testing.T) {
	f := newCUDAFixture(t)
	r := newRand(t)
	shape := []int64{4, 1024, 1024}
	want := randomElements(r, "float32", numel(shape))
	f.consumerStream(t, true)
	dptr := f.produce(t, want)
	var o countOwner
	d := Desc{Data: uintptr(dptr), Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: shape}
	m, err := Export(d, Versioned, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete()
	if err := Synchronize(d.Device, StreamNoSync, f.w); err != nil {
		t.Fatal(err)
	}
	if err := f.in.SetCapsule("cap", m.Ptr(), m.Format().CapsuleName()); err != nil {
		t.Fatal(err)
	}
	err = f.in.Exec(`
with torch.cuda.stream(s):
    t = torch.from_dlpack(cap)
    early = t.view(torch.int32).clone()
del t, cap
collect()
torch.cuda.synchronize()
assert bool((early == -1).all()), ("the unsynchronized read saw copied data", early[early != -1][:4].tolist())
del early, s, gate
`)
	if err != nil {
		t.Fatal(err)
	}
	checkLive(t, "after del", m, &o, 1)
	got := make([]byte, len(want))
	if err := f.ex.Do(func() error {
		if err := f.w.producer.Synchronize(); err != nil {
			return err
		}
		return cuda.CopyDtoH(got, dptr)
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the gated copy did not land once the gate opened")
	}
}
