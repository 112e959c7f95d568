//go:build ignore

// mkresult writes zresult.go: the CUresult constants and the sorted
// {code, name, description} table behind Result.String and Result.Error.
//
// Names and values come from the cudaError_enum in cuda.h; descriptions
// come from the driver's cuGetErrorString (the short text the CUDA tools
// print), falling back to the first sentence of the header's comment for a
// code the installed driver does not know. It therefore runs on a host with
// both the CUDA toolkit header and the driver:
//
//	go run mkresult.go -header /usr/local/cuda/include/cuda.h -o zresult.go
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

type entry struct {
	name    string
	code    int
	comment string
	desc    string
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("mkresult: ")
	header := flag.String("header", "/usr/local/cuda/include/cuda.h", "cuda.h to read the CUresult enum from")
	lib := flag.String("lib", "libcuda.so.1", "driver library whose cuGetErrorString gives the descriptions")
	out := flag.String("o", "zresult.go", "output file")
	flag.Parse()

	src, err := os.ReadFile(*header)
	if err != nil {
		log.Fatal(err)
	}
	version := cudaVersion(src)
	entries, err := parseEnum(src)
	if err != nil {
		log.Fatalf("%s: %v", *header, err)
	}
	driverVersion, err := describe(*lib, entries)
	if err != nil {
		log.Fatal(err)
	}
	code, err := generate(entries, version, driverVersion)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, code, 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s: %d codes from cuda.h %d, descriptions from driver %d", *out, len(entries), version, driverVersion)
}

func cudaVersion(src []byte) int {
	m := regexp.MustCompile(`(?m)^#define CUDA_VERSION (\d+)`).FindSubmatch(src)
	if m == nil {
		log.Fatal("no CUDA_VERSION in header")
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

var (
	enumRE  = regexp.MustCompile(`(?s)typedef enum cudaError_enum \{(.*?)\} CUresult;`)
	tokenRE = regexp.MustCompile(`(?s)/\*\*(.*?)\*/|(CUDA_[A-Z0-9_]+)\s*=\s*(\d+)`)
)

// parseEnum returns the enum's entries in value order, each with the doc
// comment that precedes it.
func parseEnum(src []byte) ([]entry, error) {
	m := enumRE.FindSubmatch(src)
	if m == nil {
		return nil, fmt.Errorf("no cudaError_enum")
	}
	var entries []entry
	var comment string
	seen := map[int]string{}
	for _, t := range tokenRE.FindAllSubmatch(m[1], -1) {
		if t[1] != nil {
			comment = string(t[1])
			continue
		}
		code, err := strconv.Atoi(string(t[3]))
		if err != nil {
			return nil, err
		}
		name := string(t[2])
		if prev, ok := seen[code]; ok {
			return nil, fmt.Errorf("%s and %s share code %d", prev, name, code)
		}
		seen[code] = name
		entries = append(entries, entry{name: name, code: code, comment: firstSentence(comment)})
		comment = ""
	}
	if len(entries) < 50 {
		return nil, fmt.Errorf("only %d CUresult codes found", len(entries))
	}
	// Sorted by code: the table is binary-searched.
	for i := 1; i < len(entries); i++ {
		for j := i; j > 0 && entries[j].code < entries[j-1].code; j-- {
			entries[j], entries[j-1] = entries[j-1], entries[j]
		}
	}
	return entries, nil
}

func firstSentence(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		words = append(words, strings.Fields(line)...)
	}
	s := strings.Join(words, " ")
	s = strings.NewReplacer("\\p ", "", "::", "", "\\e ", "").Replace(s)
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, ".")
}

// describe fills desc from the driver and returns its version.
func describe(lib string, entries []entry) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", lib, err)
	}
	var getString func(r int32, s *unsafe.Pointer) int32
	var driverVersion func(v *int32) int32
	for _, b := range []struct {
		name string
		fn   any
	}{{"cuGetErrorString", &getString}, {"cuDriverGetVersion", &driverVersion}} {
		addr, err := purego.Dlsym(h, b.name)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", lib, err)
		}
		purego.RegisterFunc(b.fn, addr)
	}
	var v int32
	if r := driverVersion(&v); r != 0 {
		return 0, fmt.Errorf("cuDriverGetVersion: CUresult %d", r)
	}
	for i := range entries {
		e := &entries[i]
		var p unsafe.Pointer
		if r := getString(int32(e.code), &p); r == 0 && p != nil {
			e.desc = goString(p)
			continue
		}
		if e.comment == "" {
			return 0, fmt.Errorf("driver %d does not describe %s (%d) and the header has no comment for it", v, e.name, e.code)
		}
		log.Printf("driver %d does not describe %s (%d); using the header's comment", v, e.name, e.code)
		e.desc = strings.ToLower(e.comment[:1]) + e.comment[1:]
	}
	return int(v), nil
}

// goString copies the NUL-terminated C string at p (static driver data).
func goString(p unsafe.Pointer) string {
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

func generate(entries []entry, version, driverVersion int) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by mkresult.go from cuda.h (CUDA_VERSION %d) and driver %d's cuGetErrorString. DO NOT EDIT.\n\n", version, driverVersion)
	b.WriteString("package cuda\n\n")
	b.WriteString("// CUresult codes, as cuda.h names them.\nconst (\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "\t// %s (%d): %s.\n", e.name, e.code, strings.TrimSuffix(e.desc, "."))
		fmt.Fprintf(&b, "\t%s Result = %d\n", e.name, e.code)
	}
	b.WriteString(")\n\n")
	b.WriteString("// resultTable is sorted by code for Result.entry's binary search.\n")
	b.WriteString("var resultTable = [...]resultEntry{\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "\t{%s, %q, %q},\n", e.name, e.name, e.desc)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
