package cuda

import (
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// LibraryEnv names the environment variable that overrides the driver
// library to open (a path or soname). It is read once, at the first call
// into the package; later changes have no effect.
const LibraryEnv = "DAMACY_LIBCUDA"

// defaultLibrary is the driver's soname; the NVIDIA driver installs it.
const defaultLibrary = "libcuda.so.1"

// loaded is the process's one driver: the library opened, every symbol
// resolved and cuInit(0) called, on first use.
var loaded = sync.OnceValues(func() (*driver, error) {
	lib := os.Getenv(LibraryEnv)
	if lib == "" {
		lib = defaultLibrary
	}
	d, err := open(lib)
	if err != nil {
		return nil, err
	}
	if err := check("cuInit", d.cuInit(0)); err != nil {
		return nil, err
	}
	return d, nil
})

// api returns the loaded driver, loading and initialising it on first use.
func api() (*driver, error) { return loaded() }

// Init loads libcuda.so.1 (or the library named by $DAMACY_LIBCUDA),
// resolves its entry points and calls cuInit(0). It runs once per process;
// later calls return the first call's result. Every other function of the
// package calls it implicitly.
//
// A missing library or symbol gives a *LoadError (errors.Is(err,
// ErrNoDriver)); a cuInit failure gives an *Error, e.g. matching
// ErrNoDevice on a host without a GPU.
func Init() error {
	_, err := loaded()
	return err
}

// LoadError reports a driver library that could not be opened, or that
// lacks required entry points. It matches ErrNoDriver.
type LoadError struct {
	Library string   // what was opened: a soname or a path
	Missing []string // required symbols the library lacks; nil when dlopen failed
	Err     error    // dlopen's error, carrying dlerror's text; nil when symbols are missing
}

func (e *LoadError) Error() string {
	if len(e.Missing) > 0 {
		return "cuda: " + e.Library + " lacks required symbols (driver older than CUDA 12.0?): " + strings.Join(e.Missing, ", ")
	}
	return "cuda: open " + e.Library + " (is the NVIDIA driver installed?): " + e.Err.Error()
}

// Unwrap returns dlopen's error.
func (e *LoadError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNoDriver.
func (e *LoadError) Is(target error) bool { return target == ErrNoDriver }

// open dlopens lib and binds every symbol of the table. The OS thread is
// locked so that dlerror's thread-local text belongs to this dlopen.
func open(lib string) (*driver, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, &LoadError{Library: lib, Err: err}
	}
	d := new(driver)
	if missing := d.bind(func(name string) uintptr {
		addr, err := purego.Dlsym(h, name)
		if err != nil {
			return 0
		}
		return addr
	}); len(missing) > 0 {
		purego.Dlclose(h)
		return nil, &LoadError{Library: lib, Missing: missing}
	}
	// The handle stays open for the life of the process: the bound
	// functions point into it.
	return d, nil
}

// bind registers every symbol that lookup finds (0 = absent) and returns
// the required ones that are missing. Optional symbols stay nil.
func (d *driver) bind(lookup func(name string) uintptr) (missing []string) {
	for _, s := range d.symbols() {
		addr := lookup(s.name)
		if addr == 0 {
			if !s.optional {
				missing = append(missing, s.name)
			}
			continue
		}
		purego.RegisterFunc(s.fn, addr)
	}
	return missing
}
