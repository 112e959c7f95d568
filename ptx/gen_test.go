package ptx

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestStamp fails when the generated PTX is stale: zstamp.txt must list
// exactly the generator's inputs (mkptx.sh, *.h, *.cu) with their current
// SHA-256. Rerun `go generate ./ptx` after changing any of them.
func TestStamp(t *testing.T) {
	f, err := os.Open("zstamp.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stamped := map[string]string{}
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first && !regexp.MustCompile(`^# Code generated .* DO NOT EDIT\.$`).MatchString(line) {
			t.Errorf("zstamp.txt starts %q, want a Code generated line", line)
		}
		first = false
		if strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("zstamp.txt: malformed line %q", line)
		}
		stamped[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	inputs := []string{"mkptx.sh"}
	for _, pattern := range []string{"*.h", "*.cu"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, m...)
	}
	for _, name := range inputs {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); stamped[name] != got {
			t.Errorf("%s has SHA-256 %s, zstamp.txt says %q: the PTX is stale, run go generate ./ptx", name, got, stamped[name])
		}
		delete(stamped, name)
	}
	for name := range stamped {
		t.Errorf("zstamp.txt lists %s, which is not an input (any more)", name)
	}
}

// TestPTXHeaders checks each embedded PTX: it is the file on disk, it is
// marked generated, and its header asks for nothing newer than PTX ISA 8.0
// and sm_75, so that CUDA 12.0+ drivers can JIT it for Turing and later.
func TestPTXHeaders(t *testing.T) {
	tests := []struct {
		file     string
		embedded string
		entries  []string
	}{
		{"zassemble.ptx", assemblePTX, []string{"damacy_assemble"}},
		{"zstatus.ptx", statusPTX, []string{"damacy_reduce_status"}},
		{"zblosclz.ptx", bloscLZPTX, []string{"damacy_blosclz"}},
	}
	sources, err := filepath.Glob("*.cu")
	if err != nil {
		t.Fatal(err)
	}
	if len(sources) != len(tests) {
		t.Errorf("sources %v, but %d embedded PTX files", sources, len(tests))
	}
	for _, tt := range tests {
		disk, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		if string(disk) != tt.embedded {
			t.Errorf("%s: embedded copy differs from the file", tt.file)
		}
		if !slices.Contains(sources, strings.TrimPrefix(strings.TrimSuffix(tt.file, ".ptx"), "z")+".cu") {
			t.Errorf("%s has no source", tt.file)
		}
		text := tt.embedded
		firstLine, _, _ := strings.Cut(text, "\n")
		if !regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`).MatchString(firstLine) {
			t.Errorf("%s: first line %q is not a Code generated line", tt.file, firstLine)
		}
		v := regexp.MustCompile(`(?m)^\.version (\d+)\.(\d+)$`).FindStringSubmatch(text)
		if v == nil {
			t.Errorf("%s: no .version line", tt.file)
		} else if major, _ := strconv.Atoi(v[1]); major > 8 || major == 8 && v[2] != "0" {
			t.Errorf("%s: .version %s.%s, want at most 8.0", tt.file, v[1], v[2])
		}
		tg := regexp.MustCompile(`(?m)^\.target sm_(\d+)$`).FindStringSubmatch(text)
		if tg == nil {
			t.Errorf("%s: no .target sm_NN line", tt.file)
		} else if sm, _ := strconv.Atoi(tg[1]); sm > 75 {
			t.Errorf("%s: .target sm_%d, want at most sm_75", tt.file, sm)
		}
		if !strings.Contains(text, "\n.address_size 64\n") {
			t.Errorf("%s: not 64-bit PTX", tt.file)
		}
		if strings.Contains(text, ".extern") {
			t.Errorf("%s: has .extern declarations the driver cannot resolve", tt.file)
		}
		for _, e := range tt.entries {
			if !strings.Contains(text, ".entry "+e+"(") {
				t.Errorf("%s: no entry %s", tt.file, e)
			}
		}
	}
}
