package nvcomp

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Some inputs make nvCOMP fault (an illegal address poisons the CUDA
// context for the rest of the process) or write past an output buffer
// (which corrupts the neighbours' outputs). The experiments that feed it
// such inputs therefore run batches in child processes, the test binary
// itself running TestGPUChild, and split a batch that faults or overruns
// until every such chunk is alone.

// childEnv names the variable through which a parent test hands a job file
// to TestGPUChild.
const childEnv = "DAMACY_NVCOMP_CHILD"

// childJob is a batch for a child process. Chunk i of the batch is
// Chunks[i % len(Chunks)].
type childJob struct {
	Alg      Algorithm
	Names    []string
	Chunks   [][]byte
	Want     [][]byte // the correct output of each chunk, nil where there is none
	Capacity []int
	N        int           // chunks in the batch, at least len(Chunks)
	Guard    int           // bytes after each output buffer checked for stray writes
	Pack     int           // alignment of the compressed chunks (see layout)
	Repeat   int           // Decode calls before the stream is synchronised (see layout)
	NoLimit  bool          // bypass MaxZstdBatchBytes, to probe it
	Timeout  time.Duration // the child's watchdog (see layout)
}

// childResult is what the child reports, per chunk of the batch.
type childResult struct {
	Err     string // the error that ended the batch (a CUDA fault), "" if it completed
	Status  []Status
	Size    []uint64
	Correct []bool // status success, the right size, and the right bytes
	Overrun []bool
}

// outcome is what became of one chunk.
type outcome struct {
	status           Status
	size             uint64
	correct, overrun bool
	fault            string // the CUDA error when the chunk alone made the batch fail
	notRun           bool   // the time budget ran out before the chunk's turn
}

func (o outcome) String() string {
	switch {
	case o.fault != "":
		return "FAULT " + o.fault
	case o.overrun:
		return fmt.Sprintf("%v, size %d, writes outside its output", o.status, o.size)
	}
	return fmt.Sprintf("%v, size %d, correct=%v", o.status, o.size, o.correct)
}

// TestGPUChild decodes the batch named by DAMACY_NVCOMP_CHILD and writes
// the result next to it. It is a helper of isolate, not a test of its own.
func TestGPUChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("runs only as a child of the isolating tests")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var job childJob
	err = gob.NewDecoder(f).Decode(&job)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	lib, e := gpuEnv(t)
	chunks := make([]*gpuChunk, job.N)
	maxCap, total := 0, 0
	for i := range chunks {
		k := i % len(job.Chunks)
		chunks[i] = &gpuChunk{name: job.Names[k], in: job.Chunks[k], capacity: job.Capacity[k]}
		maxCap = max(maxCap, job.Capacity[k])
		total += job.Capacity[k]
	}
	res := childResult{}
	cfg := DecoderConfig{Algorithm: job.Alg, MaxChunks: job.N, MaxChunkBytes: maxCap, MaxTotalBytes: total}
	var dec *Decoder
	if err := e.Do(func() (err error) {
		if job.NoLimit {
			dec, err = lib.newDecoder(cfg)
		} else {
			dec, err = lib.NewDecoder(cfg)
		}
		return err
	}); err != nil {
		t.Fatalf("NewDecoder(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { e.Do(dec.Close) })
	if err := decodeBatch(e, dec.Decode, "child", chunks, layout{guard: job.Guard, pack: job.Pack, repeat: job.Repeat, timeout: job.Timeout}); err != nil {
		res.Err = err.Error()
	} else {
		for i, c := range chunks {
			want := job.Want[i%len(job.Chunks)]
			res.Status = append(res.Status, c.status)
			res.Size = append(res.Size, c.size)
			res.Overrun = append(res.Overrun, c.overrun)
			res.Correct = append(res.Correct, want != nil && c.status == StatusSuccess &&
				c.size == uint64(len(want)) && bytes.Equal(c.out[:len(want)], want))
		}
	}
	out, err := os.Create(path + ".out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := gob.NewEncoder(out).Encode(res); err != nil {
		t.Fatal(err)
	}
	if res.Err != "" {
		// Closing the decoder in a faulted context fails too; the parent
		// has what it needs.
		t.Skipf("batch ended with %s", res.Err)
	}
}

// runChild runs job in a child process. A child that dies without a
// result (a crash, or its watchdog) reports that as Err.
func runChild(t testing.TB, job childJob) childResult {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "job.gob")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := gob.NewEncoder(f).Encode(job); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUChild$", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	start := time.Now()
	out, runErr := cmd.CombinedOutput()
	defer func() {
		t.Logf("child: %d chunks (%d distinct) in %v", job.N, len(job.Chunks), time.Since(start).Round(time.Millisecond))
	}()
	var res childResult
	rf, err := os.Open(path + ".out")
	if err == nil {
		err = gob.NewDecoder(rf).Decode(&res)
		rf.Close()
	}
	if err != nil {
		if i := bytes.Index(out, []byte("did not finish in")); i >= 0 {
			res = childResult{Err: hangPrefix + string(bytes.SplitN(out[i:], []byte("\n"), 2)[0])}
			return res
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		res = childResult{Err: fmt.Sprintf("child process: %v: %s", runErr, lines[max(0, len(lines)-3):])}
	}
	return res
}

// hangPrefix starts the error of a child whose watchdog found the decode
// still running.
const hangPrefix = "hang: the decode "

// isolate decodes the chunks of job (N = len(Chunks)) in child processes:
// the whole batch first, then, for a batch that faults or writes outside an
// output, each half, down to single chunks.
func isolate(t testing.TB, job childJob) []outcome {
	t.Helper()
	job.N = len(job.Chunks)
	res := runChild(t, job)
	if res.Err == "" && !anyTrue(res.Overrun) || len(job.Chunks) == 1 {
		out := make([]outcome, len(job.Chunks))
		for i := range out {
			if res.Err != "" {
				out[i].fault = res.Err
				continue
			}
			out[i] = outcome{status: res.Status[i], size: res.Size[i], correct: res.Correct[i], overrun: res.Overrun[i]}
		}
		return out
	}
	h := len(job.Chunks) / 2
	half := func(lo, hi int) childJob {
		j := job
		j.Names, j.Chunks, j.Want, j.Capacity = job.Names[lo:hi], job.Chunks[lo:hi], job.Want[lo:hi], job.Capacity[lo:hi]
		return j
	}
	return append(isolate(t, half(0, h)), isolate(t, half(h, len(job.Chunks)))...)
}

// isolateGroups runs isolate on groups of at most size chunks, until the
// deadline passes; the chunks of the groups not started by then are
// reported as not run.
func isolateGroups(t testing.TB, job childJob, size int, deadline time.Time) []outcome {
	t.Helper()
	var out []outcome
	for lo := 0; lo < len(job.Chunks); lo += size {
		hi := min(lo+size, len(job.Chunks))
		if time.Now().After(deadline) {
			for range hi - lo {
				out = append(out, outcome{notRun: true})
			}
			continue
		}
		j := job
		j.Names, j.Chunks, j.Want, j.Capacity = job.Names[lo:hi], job.Chunks[lo:hi], job.Want[lo:hi], job.Capacity[lo:hi]
		out = append(out, isolate(t, j)...)
	}
	return out
}

// isolateEach decodes every chunk of job in a child process of its own.
func isolateEach(t testing.TB, job childJob) []outcome {
	t.Helper()
	var out []outcome
	for i := range job.Chunks {
		j := job
		j.Names, j.Chunks, j.Want, j.Capacity = job.Names[i:i+1], job.Chunks[i:i+1], job.Want[i:i+1], job.Capacity[i:i+1]
		out = append(out, isolate(t, j)...)
	}
	return out
}

func anyTrue(b []bool) bool {
	for _, x := range b {
		if x {
			return true
		}
	}
	return false
}
