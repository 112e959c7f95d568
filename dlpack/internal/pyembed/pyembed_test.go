package pyembed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

func TestExecEval(t *testing.T) {
	in := MustStart(t)
	t.Logf("python %s from %s", in.Version, in.Lib)
	r := rand.New(rand.NewPCG(zarrtest.Seed(t), 0))
	a, b := r.Int64N(1<<40), r.Int64N(1<<40)
	if err := in.Exec(fmt.Sprintf("x = %d\ny = %d", a, b)); err != nil {
		t.Fatal(err)
	}
	got, err := in.Eval("x * 3 + y")
	if want := fmt.Sprint(a*3 + b); err != nil || got != want {
		t.Fatalf("Eval(x * 3 + y) = %q, %v; want %q, nil", got, err, want)
	}
	if got, err := in.Eval("'caf\\u00e9 ' + str(len(sys.path) > 0)"); err != nil || got != "café True" {
		t.Fatalf("Eval of a unicode string = %q, %v", got, err)
	}
}

func TestErrors(t *testing.T) {
	in := MustStart(t)
	err := in.Exec("def f():\n    raise ValueError('boom 41')\nf()")
	if err == nil || !strings.Contains(err.Error(), "ValueError: boom 41") || !strings.Contains(err.Error(), "in f") {
		t.Fatalf("Exec of a raise = %v; want the traceback", err)
	}
	if _, err := in.Eval("1 +"); err == nil || !strings.Contains(err.Error(), "SyntaxError") {
		t.Fatalf("Eval of a syntax error = %v; want SyntaxError", err)
	}
	// The interpreter is still usable after exceptions.
	if got, err := in.Eval("2 ** 10"); err != nil || got != "1024" {
		t.Fatalf("Eval after errors = %q, %v", got, err)
	}
}

// TestCapsule checks that a capsule made from Go carries the pointer and
// the name, read back with Python's own C API through ctypes.
func TestCapsule(t *testing.T) {
	in := MustStart(t)
	MustImport(t, in, "ctypes", true)
	err := in.Exec(`
import ctypes
_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
`)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(zarrtest.Seed(t), 0))
	for i, name := range []string{"dltensor", "dltensor_versioned", "dltensor"} {
		ptr := uintptr(r.Uint64()>>8) &^ 7
		if err := in.SetCapsule("cap", ptr, name); err != nil {
			t.Fatal(err)
		}
		got, err := in.Eval(`"%s %d" % (_api.PyCapsule_GetName(cap).decode(), _api.PyCapsule_GetPointer(cap, _api.PyCapsule_GetName(cap)))`)
		if want := fmt.Sprintf("%s %d", name, ptr); err != nil || got != want {
			t.Fatalf("capsule %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if got := len(in.cnames); got != 2 {
		t.Errorf("%d capsule names in C memory; want 2, one per distinct name", got)
	}
	if err := in.SetCapsule("cap", 0, "dltensor"); err == nil {
		t.Errorf("SetCapsule with a null pointer succeeded")
	}
}

// TestConcurrentCalls calls in from many goroutines; every call must run
// on the interpreter's thread with the GIL.
func TestConcurrentCalls(t *testing.T) {
	in := MustStart(t)
	if err := in.Exec("import threading\n_tid = threading.get_ident()\n_n = 0"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 50 {
				if err := in.Exec("assert threading.get_ident() == _tid\n_n += 1"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, err := in.Eval("_n"); err != nil || got != "800" {
		t.Fatalf("_n = %q, %v; want 800", got, err)
	}
}

func TestStartTwice(t *testing.T) {
	in := MustStart(t)
	if _, err := Start(os.Getenv(pythonEnv)); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v; want ErrStarted", err)
	}
	if got, err := in.Eval("1"); err != nil || got != "1" {
		t.Fatalf("first interpreter after a second Start: %q, %v", got, err)
	}
}
