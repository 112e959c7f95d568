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

var torchCUDACases = []torchCase{
	{"float32", Versioned, true, true},
	{"bfloat16", Versioned, false, false},
	{"float32", Legacy, false, true},
	{"bfloat16", Legacy, true, false},
}

// TestTorchConsumerCUDA hands device exports to torch.from_dlpack on
// cuda:0. The producer's data arrives by asynchronous copies on its own
// non-blocking stream, over memory first set to NaNs, and the host never
// waits for them: only the stream handshake orders torch's reads after
// the copies. After the deleter ran, the producer orders its read-back
// after the consumer's stream, as an owner reusing the memory must.
func TestTorchConsumerCUDA(t *testing.T) {
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
	r := newRand(t)
	for _, tc := range torchCUDACases {
		t.Run(tc.String(), func(t *testing.T) {
			shape := []int64{8 + r.Int64N(8), 1024, 1024 + r.Int64N(64)}
			size := int(dtypeOf(tc.dtype).Bits / 8)
			want := randomElements(r, tc.dtype, numel(shape))
			path := writeExpected(t, want)

			// The consumer's stream, as torch.from_dlpack will name it.
			code := "s = torch.cuda.current_stream()"
			if tc.side {
				code = "s = torch.cuda.Stream()"
			}
			if err := in.Exec(code); err != nil {
				t.Fatal(err)
			}
			sv, err := in.Eval("1 if s.cuda_stream == 0 else s.cuda_stream")
			if err != nil {
				t.Fatal(err)
			}
			stream, err := strconv.ParseInt(sv, 10, 64)
			if err != nil {
				t.Fatal(err)
			}

			var dptr cuda.DevicePtr
			var host *cuda.HostBuffer
			err = ex.Do(func() (err error) {
				if dptr, err = cuda.MemAlloc(len(want)); err != nil {
					return err
				}
				if host, err = cuda.HostAlloc(len(want), 0); err != nil {
					return err
				}
				copy(host.Bytes(), want)
				// NaNs first, then the data, copied several times over to
				// keep the producer busy while the consumer starts.
				if err := w.producer.MemsetD8(dptr, 0xff, len(want)); err != nil {
					return err
				}
				for range 8 {
					if err := w.producer.CopyHtoD(dptr, host.Bytes()); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Do(func() error { host.Free(); return dptr.Free() })

			var o countOwner
			d := Desc{Data: uintptr(dptr), Device: Device{Type: CUDA}, DType: dtypeOf(tc.dtype), Shape: shape}
			m, err := Export(d, tc.format, &o)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Delete()
			if err := Synchronize(d.Device, stream, w); err != nil {
				t.Fatal(err)
			}
			consumeTorch(t, in, m, tc, d, fmt.Sprint(stream), path)
			checkLive(t, "torch holds the tensor", m, &o, 0)

			err = in.Exec(fmt.Sprintf("with (torch.cuda.stream(s) if %s else contextlib.nullcontext()):\n    t.neg_()\n    v = t[1:]\ndel t\ncollect()", pyBool(tc.side)))
			if err != nil {
				t.Fatal(err)
			}
			checkLive(t, "a view of the tensor remains", m, &o, 0)
			if err := in.Exec("del v\ncollect()"); err != nil {
				t.Fatal(err)
			}
			checkLive(t, "after del and gc.collect", m, &o, 1)

			// Reuse after the consumer: order the read-back after its stream.
			got := make([]byte, len(want))
			err = ex.Do(func() error {
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
			if err := in.Exec("del s"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
