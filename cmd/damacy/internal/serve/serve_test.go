package serve

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/damacy-go/damacy/pipeline"
)

// hostConfig is a small host-engine config in the seed's names.
func hostConfig() map[string]any {
	return map[string]any{
		"batch_size": 3, "host_buffer_bytes": 1 << 20, "device_buffer_bytes": 1 << 20, "dtype": "f32",
		"lookahead_batches": 2, "n_io_threads": 2, "n_compute_threads": 2, "n_zarrs_meta_cache": 8,
		"n_shards_meta_cache": 64, "max_chunk_uncompressed_bytes": 1 << 16, "max_gpu_memory_bytes": 0,
		"max_bytes_per_element": 0, "sample_shape": []int{}, "batch_slots": 2, "mapped_file_bytes": -1,
	}
}

func hello(config map[string]any) map[string]any {
	return map[string]any{"version": protocolVersion, "config": config, "device": map[string]any{"kind": "cpu"}}
}

// randomBoxes returns n boxes of extent ext, some reaching outside shape.
func randomBoxes(rng *rand.Rand, n int, shape []int64, ext []int64) [][][2]int64 {
	boxes := make([][][2]int64, n)
	for i := range boxes {
		box := make([][2]int64, len(shape))
		for k := range shape {
			s := -ext[k]/2 + rng.Int64N(shape[k]+1)
			box[k] = [2]int64{s, s + ext[k]}
		}
		boxes[i] = box
	}
	return boxes
}

func samplesOf(uri string, boxes [][][2]int64) []map[string]any {
	out := make([]map[string]any, len(boxes))
	for i, b := range boxes {
		out[i] = map[string]any{"uri": uri, "box": b}
	}
	return out
}

// TestServeHost runs the protocol against the host engine: hello, errors,
// push, pops whose bytes are read through the memfds and checked against
// the reference reader (ragged last batch, more batches than slots),
// stats, a log record, and close while a pop is blocked; hello names the
// server by Options.Version.
func TestServeHost(t *testing.T) {
	dir := t.TempDir()
	path, arr := testArray(t, dir)
	url, unblock := stallStore(t, dir)
	before, fdsBefore := runtime.NumGoroutine(), openFDs(t)
	c, done := startServeWith(t, Options{Version: "0.0.0 (0123456789ab)"})

	wantError(t, "pop before hello", c.call("pop", nil), statusInval)
	e := wantError(t, "hello version 1", c.call("hello", map[string]any{"version": 1, "config": hostConfig()}), statusInval)
	if !strings.Contains(e.Message, "2") || !strings.Contains(e.Message, "1") || e.What != "hello" {
		t.Errorf("version error %+v does not name both versions", e)
	}
	bad := hostConfig()
	bad["zzz"], bad["bogus_key"] = 1, 2
	e = wantError(t, "hello with unknown keys", c.call("hello", hello(bad)), statusInval)
	if !strings.Contains(e.Message, "bogus_key, zzz") {
		t.Errorf("unknown-key error %q does not name them", e.Message)
	}
	bad = hostConfig()
	bad["batch_size"] = -1
	wantError(t, "hello with batch_size -1", c.call("hello", hello(bad)), statusInval)
	bad = hostConfig()
	bad["dtype"] = "f64"
	wantError(t, "hello with dtype f64", c.call("hello", hello(bad)), statusInval)
	bad = hostConfig()
	bad["mapped_file_bytes"] = -2
	e = wantError(t, "hello with mapped_file_bytes -2", c.call("hello", hello(bad)), statusInval)
	if !strings.Contains(e.Message, "mapped_file_bytes") {
		t.Errorf("mapped_file_bytes error %q does not name it", e.Message)
	}

	h := mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	if h.Version != 2 || h.Engine != "host" || h.Device != nil || h.Decoder != "cpu" || h.Slots != 2 || h.PID != os.Getpid() || h.Server != "damacy 0.0.0 (0123456789ab)" {
		t.Errorf("hello response %+v", h)
	}
	wantError(t, "second hello", c.call("hello", hello(hostConfig())), statusInval)

	// Push errors: the samples before the bad one stay queued.
	ext := []int64{7, 9, 5}
	rng := rand.New(rand.NewPCG(1, 2))
	boxes := randomBoxes(rng, 11, arr.Shape(), ext)
	push := samplesOf(path, boxes[:1])
	push = append(push, map[string]any{"uri": filepath.Join(dir, "missing.zarr"), "box": boxes[1]})
	e = wantError(t, "push of a missing array", c.call("push", map[string]any{"samples": push}), statusNotFound)
	if e.Index == nil || *e.Index != 1 || e.What != "push" {
		t.Errorf("push error %+v: want index 1", e)
	}
	e = wantError(t, "push of a 2-d box", c.call("push", map[string]any{"samples": samplesOf(path, [][][2]int64{boxes[1][:2]})}), statusRank)
	if e.Index == nil || *e.Index != 0 {
		t.Errorf("push error %+v: want index 0", e)
	}
	wrong := [][2]int64{{0, 7}, {0, 9}, {0, 6}}
	wantError(t, "push of a box of another extent", c.call("push", map[string]any{"samples": samplesOf(path, [][][2]int64{wrong})}), statusInval)
	wantError(t, "push of a bad box", c.call("push", map[string]any{"samples": []map[string]any{{"uri": path, "box": [][]int64{{0, 7, 9}, {0, 9}, {0, 5}}}}}), statusInval)
	if m := mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes[1:])})); m.Accepted != 10 {
		t.Errorf("push accepted %d, want 10", m.Accepted)
	}
	mustOK(t, "flush", c.call("flush", nil))

	// 11 samples: batches of 3, 3, 3 and 2, through 2 slots.
	maps := map[int][]byte{}
	defer func() {
		for _, m := range maps {
			syscall.Munmap(m)
		}
	}()
	var held *batchMsg
	for got := 0; got < len(boxes); {
		m := mustOK(t, "pop", c.call("pop", nil))
		b := m.Batch
		if b == nil || b.Host == nil || b.CUDA != nil {
			t.Fatalf("pop: %+v", m)
		}
		wantN := min(3, len(boxes)-got)
		if b.N != wantN || len(b.Shape) != 4 || b.Shape[0] != int64(wantN) || b.Shape[1] != ext[0] || b.Shape[2] != ext[1] || b.Shape[3] != ext[2] || b.Dtype != "f32" {
			t.Fatalf("batch %+v, want %d samples of %v f32", b, wantN, ext)
		}
		per := 4 * ext[0] * ext[1] * ext[2]
		if b.NBytes != int64(wantN)*per || b.Host.Size != 3*per {
			t.Fatalf("batch %+v: nbytes/size", b)
		}
		if _, ok := maps[b.Slot]; ok == (b.FDs == 1) || m.FDs != b.FDs || len(m.fds) != b.FDs {
			t.Fatalf("batch %d of slot %d: fds %d (frame %d, received %d); a slot's memfd comes once", b.ID, b.Slot, b.FDs, m.FDs, len(m.fds))
		}
		if b.FDs == 1 {
			mem, err := syscall.Mmap(m.fds[0], 0, int(b.Host.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			syscall.Close(m.fds[0])
			maps[b.Slot] = mem
		}
		data := maps[b.Slot][b.Host.Offset : b.Host.Offset+b.NBytes]
		for i := range b.N {
			want := wantF32(t, arr, boxes[got+i])
			if !bytes.Equal(data[int64(i)*per:int64(i+1)*per], want) {
				t.Fatalf("batch %d sample %d (box %v): bytes differ from the reference reader", b.ID, i, boxes[got+i])
			}
			if bytes.Count(want, []byte{0}) == len(want) {
				t.Fatalf("sample %d is all zeros: the test checks nothing", got+i)
			}
		}
		got += b.N
		// Hold one batch while popping the next: two slots in use.
		if held != nil {
			c.send(map[string]any{"op": "release", "batch": held.ID})
		}
		held = b
	}
	if len(maps) != 2 {
		t.Errorf("4 batches used %d slots, want 2", len(maps))
	}
	c.send(map[string]any{"op": "release", "batch": held.ID})
	if m := mustOK(t, "pending", c.call("pending", nil)); m.Pending {
		t.Error("pending after every batch was popped")
	}
	st := mustOK(t, "stats", c.call("stats", nil)).Stats
	if st == nil || st.BatchesEmitted != 4 || st.BatchesTruncated != 1 || st.SamplesEmitted != 11 || st.Engine != "host" ||
		st.Assemble.Count == 0 || st.Assemble.MS <= 0 || st.Assemble.BestMS > st.Assemble.MS || st.H2D.BestMS != 1e30 || st.ZarrMetaMisses == 0 {
		t.Errorf("stats %+v", st)
	}
	mustOK(t, "stats_reset", c.call("stats_reset", nil))
	if st := mustOK(t, "stats", c.call("stats", nil)).Stats; st.BatchesEmitted != 0 || st.Assemble.Count != 0 || st.Assemble.BestMS != 1e30 {
		t.Errorf("stats after stats_reset %+v", st)
	}

	// A release of a batch the client does not hold is logged at WARN.
	wantError(t, "set_log_level 9", c.call("set_log_level", map[string]any{"level": 9}), statusInval)
	mustOK(t, "set_log_level", c.call("set_log_level", map[string]any{"level": 3}))
	c.send(map[string]any{"op": "release", "batch": held.ID})
	c.waitLog()
	if len(c.logs) != 1 || c.logs[0].Level != 3 || !strings.Contains(c.logs[0].Msg, "does not hold") || c.logs[0].Attrs["batch"] != float64(held.ID) {
		t.Errorf("log frames %+v, want one WARN about batch %d", c.logs, held.ID)
	}
	wantError(t, "unknown op", c.call("frobnicate", nil), statusInval)

	// Close while a pop is blocked (its shard does not come): the pop
	// fails with SHUTDOWN first. The shard then comes: the pipeline's
	// close waits for reads in flight.
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(url+"/u16.zarr", boxes[:1])}))
	mustOK(t, "flush", c.call("flush", nil))
	pop := c.start("pop", nil)
	time.Sleep(50 * time.Millisecond)
	closeID := c.start("close", nil)
	m, err := c.read()
	if err != nil || m.ID == nil || *m.ID != pop {
		t.Fatalf("first response after close: %+v, %v; want the pop's", m, err)
	}
	wantError(t, "blocked pop at close", m, statusShutdown)
	unblock()
	mustOK(t, "close", c.wait(closeID))
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	c.conn.Close()
	waitGoroutines(t, before)
	for _, m := range maps {
		syscall.Munmap(m)
	}
	clear(maps)
	waitFDs(t, fdsBefore)
}

// TestServeLogLevelBeforeHello checks that set_log_level needs no hello
// (a sampler's own server gets one before any), while pop does.
func TestServeLogLevelBeforeHello(t *testing.T) {
	c, done := startServe(t)
	mustOK(t, "set_log_level before hello", c.call("set_log_level", map[string]any{"level": 3}))
	wantError(t, "pop before hello", c.call("pop", nil), statusInval)
	mustOK(t, "close", c.call("close", nil))
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	c.conn.Close()
}

// TestConfigOfRemote checks hello's object-store keys: requests in flight
// and how far GETs merge (0: the pipeline's defaults).
func TestConfigOfRemote(t *testing.T) {
	raw := map[string]json.RawMessage{"io_concurrency": json.RawMessage("128"),
		"remote_gap_bytes": json.RawMessage("1048576"), "remote_span_bytes": json.RawMessage("16777216")}
	cfg, err := configOf(raw)
	if err != nil || cfg.IOConcurrency != 128 || cfg.RemoteGapBytes != 1<<20 || cfg.RemoteSpanBytes != 16<<20 {
		t.Fatalf("configOf: %+v, %v", cfg, err)
	}
	cfg, err = configOf(map[string]json.RawMessage{"io_concurrency": json.RawMessage("-1")})
	if err == nil {
		_, err = pipeline.New(cfg) // the range is New's to check
	}
	if err == nil || !strings.Contains(pythonNames(err.Error()), "io_concurrency") {
		t.Errorf("io_concurrency -1: %v", err)
	}
}

// TestConfigOfOnError checks hello's on_error: "raise" (or absent) and
// "skip"; anything else is INVAL naming the key.
func TestConfigOfOnError(t *testing.T) {
	tests := []struct {
		in   string
		want pipeline.ErrorPolicy
		ok   bool
	}{{`"raise"`, pipeline.OnErrorRaise, true}, {`"skip"`, pipeline.OnErrorSkip, true}, {`"ignore"`, 0, false}, {`1`, 0, false}}
	for _, tt := range tests {
		cfg, err := configOf(map[string]json.RawMessage{"on_error": json.RawMessage(tt.in)})
		if tt.ok && (err != nil || cfg.OnError != tt.want) {
			t.Errorf("configOf(on_error %s) = %v, %v; want %v", tt.in, cfg.OnError, err, tt.want)
		}
		if !tt.ok && (err == nil || statusOf(err) != statusInval || !strings.Contains(err.Error(), "on_error")) {
			t.Errorf("configOf(on_error %s): %v, want INVAL naming on_error", tt.in, err)
		}
	}
}
