package nvcomp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/damacy-go/damacy/cuda/cudatest"
)

// mustLoad returns the process's nvCOMP library, or skips the test saying
// why there is none. When DAMACY_NVCOMP is set, a load failure fails the
// test instead: the library was asked for by name; so does it on the GPU
// host (cudatest.RequireNVCOMP).
func mustLoad(t testing.TB) *Library {
	t.Helper()
	lib, err := Load()
	if err != nil {
		if os.Getenv(EnvLibrary) != "" {
			t.Fatalf("%s=%s, but: %v", EnvLibrary, os.Getenv(EnvLibrary), err)
		}
		cudatest.RequireNVCOMP(t, err)
		t.Skipf("no nvCOMP library (set %s to a libnvcomp.so.N to run this test): %v", EnvLibrary, err)
	}
	return lib
}

// TestVersionReport is the foundation check: it logs which library was
// loaded, its version, and the CUDA runtime it was built with.
func TestVersionReport(t *testing.T) {
	lib := mustLoad(t)
	t.Logf("nvcomp: %v", lib)
	for _, a := range lib.Skipped {
		t.Logf("skipped %s: %v", a.Path, a.Err)
	}
	if lib.Version.Major < minMajor || lib.Version.Major > maxMajor {
		t.Errorf("loaded nvCOMP %s, outside %d.x-%d.x", lib.Version, minMajor, maxMajor)
	}
	if lib.CUDARuntime.Major < 11 {
		t.Errorf("CUDA runtime %+v; want 11 or newer", lib.CUDARuntime)
	}
}

func TestStructLayout(t *testing.T) {
	var p properties
	var a alignmentRequirements
	var o decompressOpts
	tests := []struct {
		what      string
		got, want uintptr
	}{
		{"sizeof(nvcompProperties_t)", unsafe.Sizeof(p), 8},
		{"offsetof(nvcompProperties_t, version)", unsafe.Offsetof(p.version), 0},
		{"offsetof(nvcompProperties_t, cudart_version)", unsafe.Offsetof(p.cudartVersion), 4},
		{"sizeof(nvcompAlignmentRequirements_t)", unsafe.Sizeof(a), 24},
		{"offsetof(nvcompAlignmentRequirements_t, input)", unsafe.Offsetof(a.input), 0},
		{"offsetof(nvcompAlignmentRequirements_t, output)", unsafe.Offsetof(a.output), 8},
		{"offsetof(nvcompAlignmentRequirements_t, temp)", unsafe.Offsetof(a.temp), 16},
		{"sizeof(nvcompBatchedZstdDecompressOpts_t)", unsafe.Sizeof(o), 64},
		{"offsetof(nvcompBatchedZstdDecompressOpts_t, backend)", unsafe.Offsetof(o.backend), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d; want %d", tt.what, tt.got, tt.want)
		}
	}
	if o := defaultOpts(); o.backend != backendCUDA || o != (decompressOpts{backend: backendCUDA}) {
		t.Errorf("defaultOpts() = %+v; want only the CUDA backend set", o)
	}
}

func TestVersionDecode(t *testing.T) {
	tests := []struct {
		in   uint32
		want Version
		str  string
	}{
		{6000, Version{6, 0, 0}, "6.0.0"},
		{5300, Version{5, 3, 0}, "5.3.0"},
		{4213, Version{4, 2, 13}, "4.2.13"},
	}
	for _, tt := range tests {
		if got := versionFromProperties(tt.in); got != tt.want || got.String() != tt.str {
			t.Errorf("versionFromProperties(%d) = %v (%q); want %v (%q)", tt.in, got, got.String(), tt.want, tt.str)
		}
	}
	if got, want := versionFromCUDART(13040), (Version{13, 4, 0}); got != want {
		t.Errorf("versionFromCUDART(13040) = %v; want %v", got, want)
	}
	if got, want := versionFromCUDART(12090), (Version{12, 9, 0}); got != want {
		t.Errorf("versionFromCUDART(12090) = %v; want %v", got, want)
	}
}

// TestCandidates checks the discovery order on a fake environment with
// wheel layouts in a temporary directory.
func TestCandidates(t *testing.T) {
	venv, conda := t.TempDir(), t.TempDir()
	touch := func(root, rel string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v5 := touch(venv, "lib/python3.12/site-packages/nvidia/libnvcomp/lib64/libnvcomp.so.5")
	v6 := touch(venv, "lib/python3.12/site-packages/nvidia/libnvcomp/lib64/libnvcomp.so.6")
	v4 := touch(venv, "lib/python3.12/site-packages/nvidia/nvcomp/libnvcomp.so.4")
	c6 := touch(conda, "lib/python3.11/site-packages/nvidia/libnvcomp/lib64/libnvcomp.so.6")
	env := map[string]string{"VIRTUAL_ENV": venv, "CONDA_PREFIX": conda}
	got := candidates(func(k string) string { return env[k] }, filepath.Glob)
	miss := filepath.Join(conda, "lib/python3.*/site-packages/nvidia/nvcomp/libnvcomp.so.*")
	want := []candidate{
		{path: "libnvcomp.so.6"}, {path: "libnvcomp.so.5"}, {path: "libnvcomp.so.4"}, {path: "libnvcomp.so"},
		{path: v6}, {path: v5}, {path: v4}, {path: c6},
		{path: miss, miss: fs.ErrNotExist},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(candidate{}), cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}

	env[EnvLibrary] = "/opt/x/libnvcomp.so.5"
	got = candidates(func(k string) string { return env[k] }, filepath.Glob)
	if len(got) != 1 || got[0].path != "/opt/x/libnvcomp.so.5" {
		t.Errorf("with %s set, candidates = %+v; want only that file", EnvLibrary, got)
	}
	if got := candidates(func(string) string { return "" }, filepath.Glob); len(got) != 4 {
		t.Errorf("with no environment, candidates = %+v; want the 4 loader names", got)
	}
}

func TestSonameMajor(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"/a/libnvcomp.so.6", 6},
		{"libnvcomp.so.5.3.0", 5},
		{"libnvcomp.so", -1},
		{"libnvcomp.so.x", -1},
		{"libother.so.5", -1},
	}
	for _, tt := range tests {
		if got := sonameMajor(tt.in); got != tt.want {
			t.Errorf("sonameMajor(%q) = %d; want %d", tt.in, got, tt.want)
		}
	}
}

// TestLoadFirstAttempts checks that every failed candidate is reported with
// its reason, in order.
func TestLoadFirstAttempts(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libnvcomp.so.6")
	if err := os.WriteFile(notELF, []byte("not a shared library\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nothing", "libnvcomp.so.5")
	pattern := filepath.Join(dir, "lib/python3.*/site-packages/nvidia/nvcomp/libnvcomp.so.*")
	lib, err := loadFirst([]candidate{{path: notELF}, {path: missing}, {path: pattern, miss: fs.ErrNotExist}})
	if lib != nil || err == nil {
		t.Fatalf("loadFirst = %v, %v; want an error", lib, err)
	}
	var le *LoadError
	if !errors.As(err, &le) || len(le.Attempts) != 3 {
		t.Fatalf("loadFirst error = %#v; want a *LoadError with 3 attempts", err)
	}
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnsupportedVersion) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v): want ErrNotFound and fs.ErrNotExist, not ErrUnsupportedVersion", err)
	}
	for i, p := range []string{notELF, missing, pattern} {
		if le.Attempts[i].Path != p {
			t.Errorf("attempt %d is %q; want %q", i, le.Attempts[i].Path, p)
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %s", err, p)
		}
	}
	if !strings.Contains(le.Attempts[0].Err.Error(), "dlopen") {
		t.Errorf("attempt 0: %v; want the dlopen failure", le.Attempts[0].Err)
	}
}

func TestVersionError(t *testing.T) {
	err := error(&VersionError{Path: "/x/libnvcomp.so.7", Version: Version{7, 1, 2}})
	want := "nvcomp: /x/libnvcomp.so.7 is nvCOMP 7.1.2; this build supports nvCOMP 4.x to 6.x"
	if err.Error() != want {
		t.Errorf("Error() = %q; want %q", err, want)
	}
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("errors.Is(%v, ErrUnsupportedVersion) = false", err)
	}
	le := &LoadError{Attempts: []Attempt{{Path: "/x/libnvcomp.so.7", Err: err}}}
	if !errors.Is(le, ErrUnsupportedVersion) || !errors.Is(le, ErrNotFound) {
		t.Errorf("a LoadError with a version attempt must match ErrUnsupportedVersion and ErrNotFound")
	}
}

func TestCheckGeometry(t *testing.T) {
	tests := []struct {
		alg                  Algorithm
		chunks, chunk, total int
		ok                   bool
	}{
		{Zstd, 64, 1 << 16, 64 << 16, true},
		{Zstd, 64, 1 << 16, 1 << 16, true},
		{Zstd, 64, 1 << 16, 1<<16 - 1, false},
		{Zstd, 64, 1 << 16, 64<<16 + 64, false},
		{Zstd, 0, 1 << 16, 1 << 16, false},
		{Zstd, 1, 0, 0, false},
		{Zstd, 1, 1 << 31, 1 << 31, false},
		{LZ4, 1, 1 << 31, 1 << 31, true},
		{LZ4, 1, 1 << 32, 1 << 32, false},
	}
	for _, tt := range tests {
		err := checkGeometry(tt.alg, tt.chunks, tt.chunk, tt.total)
		if (err == nil) != tt.ok {
			t.Errorf("checkGeometry(%v, %d, %d, %d) = %v; want ok=%v", tt.alg, tt.chunks, tt.chunk, tt.total, err, tt.ok)
		}
	}
}

// TestLibraryHost checks the host-side queries of the loaded library:
// alignments, temp sizes, and that the by-value options struct reaches the
// library in the right place (an invalid backend in it must be refused,
// the default one accepted).
func TestLibraryHost(t *testing.T) {
	lib := mustLoad(t)
	for _, alg := range []Algorithm{Zstd, LZ4} {
		a, err := lib.Alignment(alg)
		if err != nil {
			t.Fatalf("Alignment(%v): %v", alg, err)
		}
		t.Logf("nvCOMP %s %v: alignment %+v", lib.Version, alg, a)
		for _, v := range []int{a.Input, a.Output, a.Temp} {
			if v <= 0 || v > 256 || v&(v-1) != 0 {
				t.Errorf("Alignment(%v) = %+v; want powers of two up to 256", alg, a)
			}
		}
		var prev int
		for _, g := range []struct{ n, max int }{{1, 64 << 10}, {64, 64 << 10}, {64, 1 << 20}, {4096, 1 << 20}} {
			n, err := lib.TempSize(alg, g.n, g.max, g.n*g.max)
			if err != nil {
				t.Fatalf("TempSize(%v, %d, %d): %v", alg, g.n, g.max, err)
			}
			t.Logf("nvCOMP %s %v: temp for %d × %d bytes: %d bytes (%.2f per output byte)", lib.Version, alg, g.n, g.max, n, float64(n)/float64(g.n*g.max))
			if n < prev {
				t.Errorf("TempSize(%v, %d, %d) = %d; less than for a smaller batch (%d)", alg, g.n, g.max, n, prev)
			}
			prev = n
		}
		if _, err := lib.TempSize(alg, 0, 1, 1); err == nil {
			t.Errorf("TempSize(%v, 0 chunks) succeeded", alg)
		}
		c, _ := lib.codec(alg)
		if c.abi >= 5 {
			var out alignmentRequirements
			bad := decompressOpts{backend: 99}
			if s := c.getRequiredAlignments(bad, &out); s == StatusSuccess {
				t.Errorf("%s with backend 99: success; the options struct is not where the library reads it", c.symbol("DecompressGetRequiredAlignments"))
			}
			if s := c.getRequiredAlignments(defaultOpts(), &out); s != StatusSuccess {
				t.Errorf("%s with the default options: %v", c.symbol("DecompressGetRequiredAlignments"), s)
			}
		}
	}
	if _, err := lib.Alignment(Algorithm(9)); err == nil {
		t.Error("Alignment(9) succeeded")
	}
}

// TestDecompressCallPlacesOpts checks, without a GPU, that decompressCall
// passes the options struct and the arguments around it where nvCOMP reads
// them: with backend 99 the call must be refused up front (the library
// validates the options before it touches CUDA), with a valid backend it
// must get as far as CUDA. On a GPU host the second call would launch
// kernels on bogus pointers, so this test runs only where there is no
// usable driver; there the decode tests cover the same path.
func TestDecompressCallPlacesOpts(t *testing.T) {
	lib := mustLoad(t)
	if err := gpuProbe(); err == nil {
		t.Skip("a GPU is present: the decode tests check the call instead")
	}
	if lib.Version.Major < 5 {
		t.Skipf("nvCOMP %s has no options struct", lib.Version)
	}
	for _, alg := range []Algorithm{Zstd, LZ4} {
		c, _ := lib.codec(alg)
		args := decompressArgs{inPtrs: 0x1000, inBytes: 0x2000, outCapacities: 0x3000, outSizes: 0x4000, n: 4,
			temp: 0x5000, tempBytes: 1 << 20, outPtrs: 0x6000, statuses: 0x7000}
		bad := newDecompressCall(c, decompressOpts{backend: 99})
		good := newDecompressCall(c, defaultOpts())
		sb, sg := bad.call(&args), good.call(&args)
		t.Logf("%s: backend 99: %v; backend CUDA: %v", c.symbol("DecompressAsync"), sb, sg)
		if sb != StatusInvalidValue && sb != StatusNotSupported {
			t.Errorf("%v: backend 99 gave %v; want a refusal of the options", alg, sb)
		}
		if sg != StatusCUDAError {
			t.Errorf("%v: backend CUDA gave %v; want %v (no driver)", alg, sg, StatusCUDAError)
		}
	}
}

func ExampleLoad() {
	lib, err := Load()
	if err != nil {
		fmt.Println("decoding on the CPU:", errors.Is(err, ErrNotFound))
		return
	}
	fmt.Println(lib.Version.Major >= 4)
}
