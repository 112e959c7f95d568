// Package pyembed runs a CPython interpreter inside the Go process, loaded
// at run time through purego, so that tests can hand DLPack capsules to
// PyTorch or NumPy in the same address space and check what they see.
//
// CPython allows one interpreter per process, and its extension modules
// (torch, numpy) cannot be unloaded: Start may succeed once per process,
// and the interpreter lives until the process exits. Every call into
// Python runs on one locked OS thread, holding the GIL only for the call.
//
// This is test support, not a binding: it binds the dozen functions the
// tests need and nothing else.
package pyembed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Errors of Start.
var (
	// ErrStarted: the process already has an interpreter.
	ErrStarted = errors.New("pyembed: python is already initialized in this process")
	// ErrNoLibpython: the interpreter's shared library is not installed
	// (or it was built without one), so it cannot be embedded.
	ErrNoLibpython = errors.New("pyembed: no shared libpython installed")
)

// Interpreter is the embedded CPython. Its methods may be called from any
// goroutine; calls run one at a time.
type Interpreter struct {
	// Version is sys.version of the interpreter.
	Version string
	// Lib is the path of the libpython that was loaded.
	Lib string

	calls   chan func()
	api     api
	globals uintptr // the __main__ module's dict (borrowed, immortal)
	tstate  uintptr // thread state saved while the GIL is released
	cnames  map[string]uintptr
}

// api is the C API subset, bound by name from libpython.
type api struct {
	Py_IsInitialized     func() int32
	Py_InitializeEx      func(initsigs int32)
	PyEval_SaveThread    func() uintptr
	PyEval_RestoreThread func(tstate uintptr)
	PyImport_AddModule   func(name string) uintptr
	PyModule_GetDict     func(module uintptr) uintptr
	PyRun_StringFlags    func(src string, start int32, globals, locals, flags uintptr) uintptr
	PyUnicode_FromString func(s string) uintptr
	PyUnicode_AsUTF8     func(o uintptr) string
	PyDict_SetItemString func(dict uintptr, key string, value uintptr) int32
	PyDict_GetItemString func(dict uintptr, key string) uintptr
	PyCapsule_New        func(ptr, name, destructor uintptr) uintptr
	PyErr_Print          func()
	Py_DecRef            func(o uintptr)
	PyMem_RawMalloc      func(n uintptr) uintptr
	PyErr_Clear          func()
}

// pyFileInput is Py_file_input from Python.h: run a sequence of statements.
const pyFileInput = 257

// probeScript prints what Start needs to know about an interpreter.
const probeScript = `
import json, os, sys, sysconfig
v = sysconfig.get_config_var
names = [n for n in (v("INSTSONAME"), v("LDLIBRARY")) if n and ".so" in n]
dirs = [d for d in (v("LIBDIR"), os.path.join(v("LIBDIR") or "", v("MULTIARCH") or ""), v("LIBPL")) if d]
libs = [os.path.join(d, n) for n in names for d in dirs] + names
home = sys.base_prefix
if sys.base_exec_prefix != sys.base_prefix:
    home += os.pathsep + sys.base_exec_prefix
print(json.dumps({"libs": libs, "home": home, "path": sys.path[1:], "shared": bool(v("Py_ENABLE_SHARED"))}))
`

type probe struct {
	Libs   []string `json:"libs"`
	Home   string   `json:"home"`
	Path   []string `json:"path"`
	Shared bool     `json:"shared"`
}

// bootstrap runs once after initialization. The runner returns "ok:" and
// the value (or "" for statements), or "error:" and the traceback.
const bootstrap = `
import sys
sys.argv = [""]
sys.path[:] = %s
def _pyembed_run(mode, src):
    import traceback
    try:
        code = compile(src, "<go>", mode)
        if mode == "eval":
            return "ok:" + str(eval(code, globals()))
        exec(code, globals())
        return "ok:"
    except BaseException:
        return "error:" + traceback.format_exc()
`

// Start loads the libpython of the interpreter at the path python (which
// it runs once to ask where its library, home and sys.path are), and
// initializes it without signal handlers, so Go keeps its own. It sets
// PYTHONHOME for the process when it is unset.
func Start(python string) (*Interpreter, error) {
	out, err := exec.Command(python, "-c", probeScript).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("pyembed: probe %s: %w", python, err)
	}
	var p probe
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("pyembed: probe %s: %w", python, err)
	}
	in := &Interpreter{calls: make(chan func()), cnames: make(map[string]uintptr)}
	started := make(chan error)
	go in.serve(p, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return in, nil
}

// serve initializes the interpreter on a locked OS thread, reports the
// outcome on started, and then runs calls on that thread forever.
func (in *Interpreter) serve(p probe, started chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread belongs to Python
	if err := in.init(p); err != nil {
		started <- err
		return
	}
	close(started)
	for f := range in.calls {
		in.api.PyEval_RestoreThread(in.tstate)
		f()
		in.tstate = in.api.PyEval_SaveThread()
	}
}

func (in *Interpreter) init(p probe) error {
	var h uintptr
	var errs []string
	found := false
	for _, lib := range p.Libs {
		if _, err := os.Stat(lib); err == nil {
			found = true
		}
		var err error
		if h, err = purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			in.Lib = lib
			break
		}
		errs = append(errs, err.Error())
	}
	if h == 0 {
		if !found {
			return fmt.Errorf("%w (Py_ENABLE_SHARED=%v): %s", ErrNoLibpython, p.Shared, strings.Join(errs, "; "))
		}
		return fmt.Errorf("pyembed: load libpython: %s", strings.Join(errs, "; "))
	}
	if err := bind(&in.api, h); err != nil {
		return fmt.Errorf("pyembed: %s: %w", in.Lib, err)
	}
	if in.api.Py_IsInitialized() != 0 {
		return ErrStarted
	}
	if _, ok := os.LookupEnv("PYTHONHOME"); !ok {
		if err := os.Setenv("PYTHONHOME", p.Home); err != nil {
			return fmt.Errorf("pyembed: set PYTHONHOME: %w", err)
		}
	}
	in.api.Py_InitializeEx(0)
	if in.api.Py_IsInitialized() == 0 {
		return fmt.Errorf("pyembed: Py_InitializeEx failed (PYTHONHOME=%s)", os.Getenv("PYTHONHOME"))
	}
	path, err := json.Marshal(p.Path) // a JSON list of strings is a Python literal
	if err != nil {
		return fmt.Errorf("pyembed: %w", err)
	}
	main := in.api.PyImport_AddModule("__main__")
	in.globals = in.api.PyModule_GetDict(main)
	r := in.api.PyRun_StringFlags(fmt.Sprintf(bootstrap, path), pyFileInput, in.globals, in.globals, 0)
	if r == 0 {
		in.api.PyErr_Print()
		return errors.New("pyembed: bootstrap failed (traceback on stderr)")
	}
	in.api.Py_DecRef(r)
	v, err := in.run("eval", "sys.version")
	if err != nil {
		return err
	}
	in.Version = v
	in.tstate = in.api.PyEval_SaveThread()
	return nil
}

// bind resolves every field of a, a struct of func fields named after C
// symbols, in the library h, and reports every missing name at once.
func bind(a *api, h uintptr) error {
	var missing []string
	v := reflect.ValueOf(a).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		purego.RegisterFunc(v.Field(i).Addr().Interface(), sym)
	}
	if missing != nil {
		return fmt.Errorf("missing symbols %s", strings.Join(missing, ", "))
	}
	return nil
}

// do runs f on the interpreter's thread with the GIL held.
func (in *Interpreter) do(f func()) {
	done := make(chan struct{})
	in.calls <- func() { f(); close(done) }
	<-done
}

// Exec runs Python statements in the __main__ namespace. A Python
// exception becomes an error carrying its traceback.
func (in *Interpreter) Exec(src string) error {
	var err error
	in.do(func() { _, err = in.run("exec", src) })
	return err
}

// Eval evaluates a Python expression in the __main__ namespace and returns
// str() of its value.
func (in *Interpreter) Eval(expr string) (string, error) {
	var v string
	var err error
	in.do(func() { v, err = in.run("eval", expr) })
	return v, err
}

// run calls _pyembed_run(mode, src); the GIL must be held.
func (in *Interpreter) run(mode, src string) (string, error) {
	if err := in.setGlobal("_pyembed_src", in.api.PyUnicode_FromString(src)); err != nil {
		return "", err
	}
	r := in.api.PyRun_StringFlags(`_pyembed_out = _pyembed_run("`+mode+`", _pyembed_src)`, pyFileInput, in.globals, in.globals, 0)
	if r == 0 {
		in.api.PyErr_Print()
		return "", errors.New("pyembed: runner failed (traceback on stderr)")
	}
	in.api.Py_DecRef(r)
	out := in.api.PyUnicode_AsUTF8(in.api.PyDict_GetItemString(in.globals, "_pyembed_out"))
	if tb, ok := strings.CutPrefix(out, "error:"); ok {
		return "", fmt.Errorf("pyembed: python raised:\n%s", tb)
	}
	v, _ := strings.CutPrefix(out, "ok:")
	return v, nil
}

// setGlobal binds name in __main__ to the new reference obj, which it
// consumes.
func (in *Interpreter) setGlobal(name string, obj uintptr) error {
	if obj == 0 {
		in.api.PyErr_Clear()
		return fmt.Errorf("pyembed: could not create the value of %s", name)
	}
	rc := in.api.PyDict_SetItemString(in.globals, name, obj)
	in.api.Py_DecRef(obj)
	if rc != 0 {
		in.api.PyErr_Clear()
		return fmt.Errorf("pyembed: could not set %s", name)
	}
	return nil
}

// SetCapsule binds the global name in __main__ to a new PyCapsule holding
// ptr under capsuleName, with no destructor: the capsule's consumer owns
// ptr. The name lives in C memory for the life of the process, as
// PyCapsule requires.
func (in *Interpreter) SetCapsule(name string, ptr uintptr, capsuleName string) error {
	var err error
	in.do(func() {
		cname, ok := in.cnames[capsuleName]
		if !ok {
			if cname = in.api.PyMem_RawMalloc(uintptr(len(capsuleName) + 1)); cname == 0 {
				err = fmt.Errorf("pyembed: no memory for capsule name %q", capsuleName)
				return
			}
			b := unsafe.Slice((*byte)(cmem(cname)), len(capsuleName)+1)
			b[copy(b, capsuleName)] = 0
			in.cnames[capsuleName] = cname
		}
		err = in.setGlobal(name, in.api.PyCapsule_New(ptr, cname, 0))
	})
	return err
}

// cmem turns the address of C memory into an unsafe.Pointer; see
// dlpack's function of the same name for why this is sound.
func cmem(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}
