package ptx

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"testing"
)

// cFields maps each C struct of kernels.h to its Go mirror and the C field
// names to Go field names.
var cStructs = []struct {
	c      string
	goType reflect.Type
	fields map[string]string
}{
	{"damacy_op", reflect.TypeFor[Op](), map[string]string{
		"src_offset": "SrcOffset", "sample": "Sample", "first_block": "FirstBlock",
		"dst_start": "DstStart", "extent": "Extent", "src_start": "SrcStart",
		"src_shape": "SrcShape", "src_stride": "SrcStride", "nbytes": "NBytes",
		"blocksize": "BlockSize", "fill": "Fill", "src_dtype": "SrcDtype",
		"shuffle": "Shuffle", "typesize": "TypeSize", "big_endian": "BigEndian",
	}},
	{"damacy_transform", reflect.TypeFor[Transform](), map[string]string{
		"perm": "Perm", "flips": "Flips", "intensity": "Intensity", "reserved": "_",
		"scale": "Scale", "offset": "Offset", "lo": "Lo", "hi": "Hi",
	}},
	{"damacy_misfits", reflect.TypeFor[MisfitStatus](), map[string]string{
		"count": "Count", "first": "First", "value": "Value", "dtype": "Src", "lock": "_",
	}},
	{"damacy_assemble_params", reflect.TypeFor[assembleParams](), map[string]string{
		"ops": "ops", "block_ops": "blockOps", "arena": "arena", "out": "out",
		"transforms": "transforms", "misfits": "misfits",
		"rank": "rank", "out_dtype": "outDtype", "shape": "shape",
	}},
	{"damacy_status_summary", reflect.TypeFor[StatusSummary](), map[string]string{
		"bad": "Bad", "first": "First", "status": "Status", "reserved": "_",
		"actual": "Actual", "expected": "Expected",
	}},
	{"damacy_status_params", reflect.TypeFor[statusParams](), map[string]string{
		"statuses": "statuses", "actual": "actual", "expected": "expected",
		"summary": "summary", "n": "n", "reserved": "_",
	}},
	{"damacy_lz4_check_params", reflect.TypeFor[lz4CheckParams](), map[string]string{
		"ptrs": "ptrs", "lens": "lens", "expected": "expected",
		"empty": "empty", "n": "n", "reserved": "_",
	}},
	{"damacy_blosclz_params", reflect.TypeFor[bloscLZParams](), map[string]string{
		"ptrs": "ptrs", "lens": "lens", "outs": "outs", "caps": "caps",
		"actual": "actual", "statuses": "statuses", "n": "n", "reserved": "_",
	}},
}

// TestStructLayout checks every Go mirror against the static_asserts of
// kernels.h, which nvcc enforces on the C side: same size, same offset and
// same width for every field, and no field left unchecked on either side.
func TestStructLayout(t *testing.T) {
	src, err := os.ReadFile("kernels.h")
	if err != nil {
		t.Fatal(err)
	}
	offsetRE := regexp.MustCompile(`static_assert\(offsetof\(struct (\w+), (\w+)\) == (\d+),`)
	sizeRE := regexp.MustCompile(`static_assert\(sizeof\(struct (\w+)\) == (\d+),`)
	fieldRE := regexp.MustCompile(`(?m)^\s+(?:unsigned )?(?:long long|int|short|char|float)\s+(\w+)(?:\[DAMACY_MAX_RANK\])?;`)
	bodyRE := regexp.MustCompile(`(?s)struct (\w+) \{(.*?)\n\};`)

	offsets := map[string]map[string]uintptr{}
	for _, m := range offsetRE.FindAllStringSubmatch(string(src), -1) {
		if offsets[m[1]] == nil {
			offsets[m[1]] = map[string]uintptr{}
		}
		n, _ := strconv.Atoi(m[3])
		offsets[m[1]][m[2]] = uintptr(n)
	}
	sizes := map[string]uintptr{}
	for _, m := range sizeRE.FindAllStringSubmatch(string(src), -1) {
		n, _ := strconv.Atoi(m[2])
		sizes[m[1]] = uintptr(n)
	}
	declared := map[string][]string{}
	for _, m := range bodyRE.FindAllStringSubmatch(string(src), -1) {
		for _, f := range fieldRE.FindAllStringSubmatch(m[2], -1) {
			declared[m[1]] = append(declared[m[1]], f[1])
		}
	}

	for _, s := range cStructs {
		if len(declared[s.c]) != len(s.fields) {
			t.Errorf("struct %s declares fields %v; the test maps %d", s.c, declared[s.c], len(s.fields))
		}
		if got, want := s.goType.Size(), sizes[s.c]; got != want || want == 0 {
			t.Errorf("sizeof %s: Go %v = %d, C asserts %d", s.c, s.goType, got, want)
		}
		// Go fields in order; blank ones matched to C fields by offset.
		goFields := map[uintptr]reflect.StructField{}
		for i := range s.goType.NumField() {
			f := s.goType.Field(i)
			if f.Type.Size() > 0 {
				goFields[f.Offset] = f
			}
		}
		if len(goFields) != len(s.fields) {
			t.Errorf("%v has %d non-empty fields; %s has %d", s.goType, len(goFields), s.c, len(s.fields))
		}
		for cName, goName := range s.fields {
			off, ok := offsets[s.c][cName]
			if !ok {
				t.Errorf("kernels.h asserts no offset for %s.%s", s.c, cName)
				continue
			}
			f, ok := goFields[off]
			if !ok || f.Name != goName {
				t.Errorf("%s.%s at offset %d: Go field there is %q, want %q", s.c, cName, off, f.Name, goName)
			}
		}
		// Each field's width: the distance to the next asserted offset.
		for cName, off := range offsets[s.c] {
			end := sizes[s.c]
			for _, o := range offsets[s.c] {
				if o > off && o < end {
					end = o
				}
			}
			if f := goFields[off]; f.Type != nil && f.Type.Size() != end-off {
				t.Errorf("%s.%s spans %d bytes in C, Go %s is %d", s.c, cName, end-off, f.Type, f.Type.Size())
			}
		}
	}
}

// TestDefines checks the constants that Go and kernels.h share.
func TestDefines(t *testing.T) {
	src, err := os.ReadFile("kernels.h")
	if err != nil {
		t.Fatal(err)
	}
	defines := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (DAMACY_\w+) (\d+)$`).FindAllStringSubmatch(string(src), -1) {
		defines[m[1]], _ = strconv.Atoi(m[2])
	}
	want := map[string]int{
		"DAMACY_MAX_RANK":                  MaxRank,
		"DAMACY_ASSEMBLE_THREADS":          assembleThreads,
		"DAMACY_ASSEMBLE_ELEMS_PER_THREAD": assembleElemsPerThread,
		"DAMACY_ASSEMBLE_GROUPS":           assembleGroups,
		"DAMACY_STATUS_THREADS":            statusThreads,
		"DAMACY_LZ4_CHECK_THREADS":         lz4CheckThreads,
		"DAMACY_BLOSCLZ_THREADS":           bloscLZThreads,
		"DAMACY_FILL":                      0,
		"DAMACY_BOOL":                      int(Bool),
		"DAMACY_INT8":                      int(Int8),
		"DAMACY_INT16":                     int(Int16),
		"DAMACY_INT32":                     int(Int32),
		"DAMACY_INT64":                     int(Int64),
		"DAMACY_UINT8":                     int(Uint8),
		"DAMACY_UINT16":                    int(Uint16),
		"DAMACY_UINT32":                    int(Uint32),
		"DAMACY_UINT64":                    int(Uint64),
		"DAMACY_FLOAT16":                   int(Float16),
		"DAMACY_FLOAT32":                   int(Float32),
		"DAMACY_FLOAT64":                   int(Float64),
		"DAMACY_BFLOAT16":                  int(BFloat16),
		"DAMACY_NOSHUFFLE":                 int(NoShuffle),
		"DAMACY_BYTESHUFFLE":               int(ByteShuffle),
		"DAMACY_BITSHUFFLE":                int(BitShuffle),
	}
	for name, w := range want {
		if got, ok := defines[name]; !ok || got != w {
			t.Errorf("kernels.h %s = %d (defined: %v), Go has %d", name, got, ok, w)
		}
	}
	for name := range defines {
		if _, ok := want[name]; !ok {
			t.Errorf("kernels.h defines %s, which no Go constant mirrors", name)
		}
	}
}
