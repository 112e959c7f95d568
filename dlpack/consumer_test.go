package dlpack

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/damacy-go/damacy/dlpack/internal/pyembed"
)

// This file hands exports to real consumers, NumPy and PyTorch, running
// in the embedded interpreter: in the same process, zero-copy, as a Go
// program that hosts Python would. consumer_cuda_test.go does the same
// with device memory.

// consumer returns the shared interpreter with testdata/consumer.py
// loaded, or skips the test.
func consumer(t *testing.T) *pyembed.Interpreter {
	t.Helper()
	in := pyembed.MustStart(t)
	pyembed.MustImport(t, in, "numpy", true)
	src, err := os.ReadFile(filepath.Join("testdata", "consumer.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Exec(string(src)); err != nil {
		t.Fatal(err)
	}
	return in
}

// randomElements returns n random elements of type dt ("float32" or
// "bfloat16"): normally distributed values, the bfloat16 ones rounded to
// nearest even from float32.
func randomElements(r *rand.Rand, dt string, n int) []byte {
	size := 4
	if dt == "bfloat16" {
		size = 2
	}
	b := make([]byte, n*size)
	for i := range n {
		f := math.Float32bits(float32(r.NormFloat64() * 1000))
		if size == 4 {
			binary.LittleEndian.PutUint32(b[4*i:], f)
		} else {
			binary.LittleEndian.PutUint16(b[2*i:], uint16((f+0x7fff+(f>>16)&1)>>16))
		}
	}
	return b
}

// negated returns b with the sign bit of every size-byte element flipped:
// what a consumer's in-place negation leaves.
func negated(b []byte, size int) []byte {
	out := slices.Clone(b)
	for i := size - 1; i < len(out); i += size {
		out[i] ^= 0x80
	}
	return out
}

func dtypeOf(name string) DataType {
	if name == "bfloat16" {
		return Scalar(Bfloat, 16)
	}
	return Scalar(Float, 32)
}

func pyTuple(shape []int64) string {
	s := make([]string, len(shape))
	for i, e := range shape {
		s[i] = fmt.Sprint(e)
	}
	return "(" + strings.Join(s, ", ") + ",)"
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func numel(shape []int64) int {
	n := 1
	for _, e := range shape {
		n *= int(e)
	}
	return n
}

// writeExpected writes the element bits the consumer must see.
func writeExpected(t *testing.T, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "expected.bin")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkLive fails the test unless the export is live with no release
// (want 0) or ended with exactly one release (want 1).
func checkLive(t *testing.T, when string, m *Managed, o *countOwner, want int32) {
	t.Helper()
	if got, l := o.n.Load(), isLive(m.Ptr()); got != want || l != (want == 0) {
		t.Fatalf("%s: %d releases, block live %v; want %d, %v", when, got, l, want, want == 0)
	}
}

// TestNumPyConsumer hands host exports to numpy.from_dlpack, checks the
// values, the zero-copy address and the capsule rename, writes through
// the array, and checks that the deleter runs once, when the last view
// goes.
func TestNumPyConsumer(t *testing.T) {
	in := consumer(t)
	c := mustLoadC(t)
	r := newRand(t)
	for _, f := range []Format{Versioned, Legacy} {
		t.Run(f.String(), func(t *testing.T) {
			shape := []int64{2 + r.Int64N(5), 1 + r.Int64N(9), 3}
			want := randomElements(r, "float32", numel(shape))
			data := cBuffer(t, c, r, len(want))
			mem := unsafe.Slice((*byte)(cmem(data)), len(want))
			copy(mem, want)
			path := writeExpected(t, want)
			var o countOwner
			m, err := Export(Desc{Data: data, Device: Device{Type: CPU}, DType: Scalar(Float, 32), Shape: shape}, f, &o)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Delete() // a no-op once the consumer's deleter ran
			if err := in.SetCapsule("cap", m.Ptr(), f.CapsuleName()); err != nil {
				t.Fatal(err)
			}
			err = in.Exec(fmt.Sprintf(`
p = Producer(cap, (1, 0))
a = np.from_dlpack(p)
assert capsule_name(cap) == "used_%s", capsule_name(cap)
assert p.streams == [None], p.streams
del cap, p
check_numpy(a, %d, %s, %q)
`, f.CapsuleName(), data, pyTuple(shape), path))
			if err != nil {
				t.Fatal(err)
			}
			checkLive(t, "numpy holds the array", m, &o, 0)
			// NumPy marks arrays from legacy capsules read-only: DLPack 0.x
			// has no flag to say whether writing is allowed.
			writable := f == Versioned
			err = in.Exec(fmt.Sprintf("assert a.flags.writeable == %s\nif a.flags.writeable:\n    np.negative(a, out=a)\nv = a[1:]\ndel a\ncollect()", pyBool(writable)))
			if err != nil {
				t.Fatal(err)
			}
			checkLive(t, "a view of the array remains", m, &o, 0)
			if writable && !slices.Equal(mem, negated(want, 4)) {
				t.Fatalf("numpy's in-place negation is not in the exported memory")
			}
			if err := in.Exec("del v\ncollect()"); err != nil {
				t.Fatal(err)
			}
			checkLive(t, "after del and gc.collect", m, &o, 1)
		})
	}
}

// TestUnconsumedCapsule drops a capsule no consumer took: its block stays
// until Delete, which the producer calls.
func TestUnconsumedCapsule(t *testing.T) {
	in := consumer(t)
	var o countOwner
	m, err := Export(Desc{Data: 4096, Device: Device{Type: CUDA}, DType: Scalar(Bfloat, 16), Shape: []int64{8, 8}}, Versioned, &o)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetCapsule("cap", m.Ptr(), m.Format().CapsuleName()); err != nil {
		t.Fatal(err)
	}
	if err := in.Exec(`assert capsule_name(cap) == "dltensor_versioned"` + "\ndel cap\ncollect()"); err != nil {
		t.Fatal(err)
	}
	checkLive(t, "capsule dropped unconsumed", m, &o, 0)
	m.Delete()
	checkLive(t, "after Delete", m, &o, 1)
}

// torchCase is one hand-over to torch.from_dlpack.
type torchCase struct {
	dtype    string // "float32" or "bfloat16"
	format   Format
	producer bool // pass an object with __dlpack__, not the bare capsule
	side     bool // CUDA: consume on a new torch stream, not the default one
}

func (tc torchCase) String() string {
	s := tc.dtype + "/" + tc.format.String()
	if tc.producer {
		s += "/producer"
	} else {
		s += "/capsule"
	}
	if tc.side {
		s += "/side-stream"
	}
	return s
}

// Every dtype with every format, each format both bare and as a producer.
var torchCPUCases = []torchCase{
	{"float32", Versioned, true, false},
	{"bfloat16", Legacy, false, false},
	{"float32", Legacy, true, false},
	{"bfloat16", Versioned, false, false},
}

// consumeTorch hands m to torch.from_dlpack in the interpreter as t, on
// the torch stream named s when tc.side (otherwise the current one), and
// checks what torch sees: pointer, shape, strides, dtype, device, values,
// the capsule rename and, for a producer, the stream torch asked for.
func consumeTorch(t *testing.T, in *pyembed.Interpreter, m *Managed, tc torchCase, d Desc, wantStream, path string) {
	t.Helper()
	if err := in.SetCapsule("cap", m.Ptr(), m.Format().CapsuleName()); err != nil {
		t.Fatal(err)
	}
	src := "cap"
	if tc.producer {
		src = fmt.Sprintf("Producer(cap, (%d, %d))", d.Device.Type, d.Device.ID)
	}
	err := in.Exec(fmt.Sprintf(`
src = %s
with (torch.cuda.stream(s) if %s else contextlib.nullcontext()):
    t = torch.from_dlpack(src)
    check_torch(t, %d, %s, %q, %q, %q)
assert capsule_name(cap) == "used_%s", capsule_name(cap)
if %s:
    assert src.streams == [%s], (src.streams, %q)
del src, cap
`, src, pyBool(tc.side), d.Data, pyTuple(d.Shape), tc.dtype, d.Device.String(), path,
		m.Format().CapsuleName(), pyBool(tc.producer), wantStream, wantStream))
	if err != nil {
		t.Fatal(err)
	}
}

// TestTorchConsumer hands host exports to torch.from_dlpack.
func TestTorchConsumer(t *testing.T) {
	in := consumer(t)
	pyembed.MustImport(t, in, "torch", false)
	if err := in.Exec("import contextlib"); err != nil {
		t.Fatal(err)
	}
	c := mustLoadC(t)
	r := newRand(t)
	for _, tc := range torchCPUCases {
		t.Run(tc.String(), func(t *testing.T) {
			shape := []int64{1 + r.Int64N(4), 2 + r.Int64N(30), 1 + r.Int64N(17)}
			size := int(dtypeOf(tc.dtype).Bits / 8)
			want := randomElements(r, tc.dtype, numel(shape))
			data := cBuffer(t, c, r, len(want))
			mem := unsafe.Slice((*byte)(cmem(data)), len(want))
			copy(mem, want)
			path := writeExpected(t, want)
			var o countOwner
			d := Desc{Data: data, Device: Device{Type: CPU}, DType: dtypeOf(tc.dtype), Shape: shape}
			m, err := Export(d, tc.format, &o)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Delete()
			var w recordWaiter
			if err := Synchronize(d.Device, StreamLegacy, &w); err != nil || !slices.Equal(w.calls, []string{"host"}) {
				t.Fatalf("Synchronize(cpu) = %v, calls %q", err, w.calls)
			}
			consumeTorch(t, in, m, tc, d, "None", path)
			checkLive(t, "torch holds the tensor", m, &o, 0)
			if err := in.Exec("t.neg_()\nv = t[1:]\ndel t\ncollect()"); err != nil {
				t.Fatal(err)
			}
			checkLive(t, "a view of the tensor remains", m, &o, 0)
			if !slices.Equal(mem, negated(want, size)) {
				t.Fatalf("torch's in-place negation is not in the exported memory")
			}
			if err := in.Exec("del v\ncollect()"); err != nil {
				t.Fatal(err)
			}
			checkLive(t, "after del and gc.collect", m, &o, 1)
		})
	}
}

// TestDeleterOnPythonThread drops the last reference on a thread that
// Python created, so the deleter runs there, as it would when a consumer's
// worker thread frees a batch.
func TestDeleterOnPythonThread(t *testing.T) {
	in := consumer(t)
	pyembed.MustImport(t, in, "threading", true)
	var o countOwner
	var tid atomic.Int64
	owner := ReleaseFunc(func() { tid.Store(int64(syscall.Gettid())); o.Release() })
	data := cBuffer(t, mustLoadC(t), newRand(t), 4*20)
	d := Desc{Data: data, Device: Device{Type: CPU}, DType: Scalar(Float, 32), Shape: []int64{4, 5}}
	m, err := Export(d, Versioned, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete()
	if err := in.SetCapsule("cap", m.Ptr(), m.Format().CapsuleName()); err != nil {
		t.Fatal(err)
	}
	err = in.Exec(`
a = np.from_dlpack(Producer(cap, (1, 0)))
del cap
def drop():
    global a, dropper
    dropper = threading.get_native_id()
    del a
    collect()
th = threading.Thread(target=drop)
th.start()
th.join()
`)
	if err != nil {
		t.Fatal(err)
	}
	checkLive(t, "after the thread dropped the array", m, &o, 1)
	got, err := in.Eval("'%d %d' % (dropper, threading.get_native_id())")
	if err != nil {
		t.Fatal(err)
	}
	var dropper, main int64
	if _, err := fmt.Sscan(got, &dropper, &main); err != nil {
		t.Fatalf("thread ids %q: %v", got, err)
	}
	if tid.Load() != dropper || dropper == main {
		t.Fatalf("deleter ran on thread %d; the dropping thread is %d, the interpreter's %d", tid.Load(), dropper, main)
	}
}
