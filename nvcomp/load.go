package nvcomp

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// EnvLibrary is the environment variable that names the nvCOMP library file
// to load. When it is set, Load tries that file only.
const EnvLibrary = "DAMACY_NVCOMP"

// Version is an nvCOMP (or CUDA runtime) version.
type Version struct {
	Major, Minor, Patch int
}

// String returns "major.minor.patch".
func (v Version) String() string {
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor) + "." + strconv.Itoa(v.Patch)
}

// versionFromProperties decodes nvcompProperties_t.version, which is
// major*1000 + minor*100 + patch (MAKE_SEMANTIC_VERSION of nvcomp/version.h).
func versionFromProperties(v uint32) Version {
	return Version{Major: int(v / 1000), Minor: int(v % 1000 / 100), Patch: int(v % 100)}
}

// versionFromCUDART decodes a CUDART_VERSION, major*1000 + minor*10.
func versionFromCUDART(v uint32) Version {
	return Version{Major: int(v / 1000), Minor: int(v % 1000 / 10)}
}

// Library is a loaded nvCOMP library and the decompression ABI bound for its
// major version. It is shared and safe for concurrent use; it is never
// unloaded.
type Library struct {
	// Path is the file that was loaded: the name as given to the dynamic
	// loader, resolved to the mapped file when the process maps show it.
	Path string
	// Version is the library's version, from nvcompGetProperties.
	Version Version
	// CUDARuntime is the CUDA runtime version the library was built with
	// (nvCOMP links the runtime statically; it needs a driver of the same
	// CUDA major version).
	CUDARuntime Version
	// Skipped lists the candidates tried before this one, and why each
	// could not be used.
	Skipped []Attempt

	zstd, lz4 codec
}

// String describes the library in one line, e.g.
// "nvCOMP 6.0.0 (CUDA runtime 13.4) from /usr/lib/libnvcomp.so.6".
func (l *Library) String() string {
	return fmt.Sprintf("nvCOMP %s (CUDA runtime %d.%d) from %s",
		l.Version, l.CUDARuntime.Major, l.CUDARuntime.Minor, l.Path)
}

func (l *Library) codec(alg Algorithm) (*codec, error) {
	switch alg {
	case Zstd:
		return &l.zstd, nil
	case LZ4:
		return &l.lz4, nil
	}
	return nil, fmt.Errorf("nvcomp: unknown algorithm %d", uint8(alg))
}

// Alignment returns the alignments that alg's decompressor requires of its
// input chunks, output chunks and temp buffer. On 5.x and 6.x they come from
// nvcompBatched<Alg>DecompressGetRequiredAlignments; 4.x has no query, and
// the most restrictive values of the 4.x headers are returned. Aligning
// every buffer to 16 bytes or more is always safe and may be faster.
func (l *Library) Alignment(alg Algorithm) (Alignment, error) {
	c, err := l.codec(alg)
	if err != nil {
		return Alignment{}, err
	}
	return c.alignment()
}

// TempSize returns the device scratch bytes that one batched decompression
// of up to maxChunks chunks, each at most maxChunkBytes and maxTotalBytes in
// all when decompressed, needs. It runs on the host and enqueues no work.
// For zstd the figure is large, about three times maxTotalBytes (nvCOMP 6.0),
// so budgets must count it.
func (l *Library) TempSize(alg Algorithm, maxChunks, maxChunkBytes, maxTotalBytes int) (int, error) {
	c, err := l.codec(alg)
	if err != nil {
		return 0, err
	}
	if err := checkGeometry(alg, maxChunks, maxChunkBytes, maxTotalBytes); err != nil {
		return 0, err
	}
	return c.tempSize(maxChunks, maxChunkBytes, maxTotalBytes)
}

func checkGeometry(alg Algorithm, maxChunks, maxChunkBytes, maxTotalBytes int) error {
	switch {
	case maxChunks <= 0:
		return fmt.Errorf("nvcomp: %s: max chunks per batch %d: must be positive", alg, maxChunks)
	case maxChunkBytes <= 0 || int64(maxChunkBytes) > alg.maxChunkBytes():
		return fmt.Errorf("nvcomp: %s: max chunk bytes %d: must be in [1, %d]", alg, maxChunkBytes, alg.maxChunkBytes())
	case maxTotalBytes < maxChunkBytes || maxChunks <= math.MaxInt/maxChunkBytes && maxTotalBytes > maxChunks*maxChunkBytes:
		return fmt.Errorf("nvcomp: %s: max total bytes %d: must be in [%d, %d×%d]",
			alg, maxTotalBytes, maxChunkBytes, maxChunks, maxChunkBytes)
	}
	return nil
}

// Attempt is one candidate library that Load tried and could not use.
type Attempt struct {
	Path string // a file path, a loader name, or a glob pattern that matched nothing
	Err  error  // why it could not be used
}

// LoadError is Load's error: no candidate was usable. It wraps ErrNotFound
// and every attempt's error, so errors.Is(err, ErrUnsupportedVersion) tells
// whether a library was found but had an unknown version.
type LoadError struct {
	Attempts []Attempt
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("nvcomp: no usable libnvcomp")
	for _, a := range e.Attempts {
		b.WriteString("; ")
		b.WriteString(a.Path)
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(a.Err.Error(), "nvcomp: "))
	}
	return b.String()
}

// Unwrap returns ErrNotFound followed by the attempts' errors.
func (e *LoadError) Unwrap() []error {
	errs := []error{ErrNotFound}
	for _, a := range e.Attempts {
		errs = append(errs, a.Err)
	}
	return errs
}

// VersionError reports a library whose major version has no ABI binding in
// this package. It wraps ErrUnsupportedVersion.
type VersionError struct {
	Path    string
	Version Version
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("nvcomp: %s is nvCOMP %s; this build supports nvCOMP %d.x to %d.x",
		e.Path, e.Version, minMajor, maxMajor)
}

// Unwrap returns ErrUnsupportedVersion.
func (e *VersionError) Unwrap() error { return ErrUnsupportedVersion }

// The nvCOMP major versions whose ABI this package binds.
const (
	minMajor = 4
	maxMajor = 6
)

// load is the process-wide library, found and bound on first use.
var load = sync.OnceValues(func() (*Library, error) {
	return loadFirst(candidates(os.Getenv, filepath.Glob))
})

// Load finds, loads and binds nvCOMP, once per process; later calls return
// the same result. The candidates, in order:
//
//  1. the file named by DAMACY_NVCOMP, if set (then nothing else is tried);
//  2. libnvcomp.so.6, .so.5, .so.4 and libnvcomp.so through the dynamic
//     loader's search path;
//  3. the pip wheel layouts (nvidia-libnvcomp-cu13 / -cu12 from 5.1 on,
//     nvidia-nvcomp-cu12 for 4.x and 5.0) in the active virtualenv
//     (VIRTUAL_ENV) and conda environment (CONDA_PREFIX):
//     lib/python3.*/site-packages/nvidia/libnvcomp/lib64/libnvcomp.so.N and
//     lib/python3.*/site-packages/nvidia/nvcomp/libnvcomp.so.N.
//
// A candidate is used when it loads, reports its version through
// nvcompGetProperties, has a major version from 4 to 6 and exports every
// entry point of that version's ABI. On failure the error is a *LoadError
// that lists every attempt and wraps ErrNotFound; callers then decode on the
// CPU. Load does not touch the GPU.
func Load() (*Library, error) { return load() }

// candidate is a library path to try, or a glob pattern that matched no
// file (miss is then the reason, reported as an attempt).
type candidate struct {
	path string
	miss error
}

// candidates lists the libraries to try, in Load's order.
func candidates(getenv func(string) string, glob func(string) ([]string, error)) []candidate {
	if p := getenv(EnvLibrary); p != "" {
		return []candidate{{path: p}}
	}
	var c []candidate
	for _, name := range []string{"libnvcomp.so.6", "libnvcomp.so.5", "libnvcomp.so.4", "libnvcomp.so"} {
		c = append(c, candidate{path: name})
	}
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		root := getenv(env)
		if root == "" {
			continue
		}
		for _, dir := range []string{"nvidia/libnvcomp/lib64", "nvidia/nvcomp"} {
			pattern := filepath.Join(root, "lib", "python3.*", "site-packages", dir, "libnvcomp.so.*")
			m, _ := glob(pattern) // the only error is a bad pattern, and this one is well-formed
			if len(m) == 0 {
				c = append(c, candidate{path: pattern, miss: fs.ErrNotExist})
				continue
			}
			// Newest major first; within one, the shortest name (the soname).
			sort.SliceStable(m, func(i, j int) bool {
				mi, mj := sonameMajor(m[i]), sonameMajor(m[j])
				if mi != mj {
					return mi > mj
				}
				return len(m[i]) < len(m[j])
			})
			for _, p := range m {
				c = append(c, candidate{path: p})
			}
		}
	}
	return c
}

// sonameMajor returns N of a path ending in libnvcomp.so.N[.…], or -1.
func sonameMajor(path string) int {
	rest, ok := strings.CutPrefix(filepath.Base(path), "libnvcomp.so.")
	if !ok {
		return -1
	}
	n, _, _ := strings.Cut(rest, ".")
	v, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return v
}

// loadFirst opens the candidates in order and returns the first usable one.
func loadFirst(cands []candidate) (*Library, error) {
	var tried []Attempt
	for _, c := range cands {
		if c.miss != nil {
			tried = append(tried, Attempt{Path: c.path, Err: c.miss})
			continue
		}
		lib, err := open(c.path)
		if err != nil {
			tried = append(tried, Attempt{Path: c.path, Err: err})
			continue
		}
		lib.Skipped = tried
		return lib, nil
	}
	return nil, &LoadError{Attempts: tried}
}

// open loads one library file and binds its ABI, or unloads it again.
func open(path string) (*Library, error) {
	// dlerror's text is per thread; keep dlopen and dlerror on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("nvcomp: dlopen: %w", err)
	}
	lib, err := bind(h, path)
	if err != nil {
		purego.Dlclose(h) // the bind error is what matters; a close failure adds nothing
		return nil, err
	}
	return lib, nil
}

// bind reads the version of the library at handle h and binds the matching
// decompression ABI.
func bind(h uintptr, path string) (*Library, error) {
	b := &binder{handle: h}
	var getProperties func(*properties) Status
	b.fn(&getProperties, "nvcompGetProperties")
	if err := b.err(); err != nil {
		return nil, fmt.Errorf("%w (not nvCOMP, or older than 4.1)", err)
	}
	var p properties
	if err := check("nvcompGetProperties", getProperties(&p)); err != nil {
		return nil, err
	}
	lib := &Library{
		Path:        path,
		Version:     versionFromProperties(p.version),
		CUDARuntime: versionFromCUDART(p.cudartVersion),
	}
	major := lib.Version.Major
	if major < minMajor || major > maxMajor {
		return nil, &VersionError{Path: path, Version: lib.Version}
	}
	lib.zstd = b.bindCodec(Zstd, major)
	lib.lz4 = b.bindCodec(LZ4, major)
	if err := b.err(); err != nil {
		return nil, fmt.Errorf("%w (nvCOMP %s)", err, lib.Version)
	}
	getPropertiesAddr, _ := purego.Dlsym(h, "nvcompGetProperties")
	if f := mappedFile(getPropertiesAddr); f != "" {
		lib.Path = f
	}
	return lib, nil
}

// mappedFile returns the file that the process maps at addr, from
// /proc/self/maps, or "" when that cannot be told.
func mappedFile(addr uintptr) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(s.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || uint64(addr) < start || uint64(addr) >= end {
			continue
		}
		return strings.Join(fields[5:], " ")
	}
	return ""
}

// errNoLibrary is returned by functions that need a loaded library when
// given none.
var errNoLibrary = errors.New("nvcomp: no library (nil *Library)")
