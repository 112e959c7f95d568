package pipeline

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// The planner with span keeps a batch's last wave back only while the
// next request is already queued: alone, a batch's waves all go out
// without waiting for another request; queued, each batch's first wave
// joins the last one of the batch before (at most maxWaveParts batches a
// wave), in order, starting where it ends.
func TestPlannerSpan(t *testing.T) {
	seed := zarrtest.Seed(t)
	sc := storeCase{name: "a", spec: writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16},
		ShardShape: []int64{32, 64, 64}, DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd}}}
	path := writeCase(t, t.TempDir(), sc, seed)
	cfg, err := Config{BatchSize: 4, SampleShape: []int{20, 20, 20}, Device: "cpu", HostBufferBytes: 3 << 20,
		DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHostEngine(cfg, new(statsSink))
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	a, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	req := func(id int64) *batchReq {
		r := &batchReq{id: id}
		for range cfg.BatchSize {
			r.samples = append(r.samples, Sample{URI: path, Box: randomBox(rng, a.Shape(), cfg.SampleShape)})
		}
		return r
	}
	route := func(j *job) { j.slabCost, j.arenaCost = j.chunk.Length, int64(j.layout.Bytes()) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// One request, the channel left open: the batch's last wave must
	// come out alone.
	reqs, out := make(chan *batchReq, 1), make(chan *wave, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.planWaves(ctx, reqs, out, route, true)
	}()
	reqs <- req(0)
	for {
		select {
		case w := <-out:
			if w.joinsNext || w.carried {
				t.Fatalf("a lone batch's wave %d joins another", w.index)
			}
			if !w.last {
				continue
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the planner held a batch's last wave back with no request queued")
		}
		break
	}
	close(reqs)
	<-done

	// Twelve requests queued at once.
	const n = 12
	reqs, out = make(chan *batchReq, n), make(chan *wave, 1024)
	for i := range n {
		reqs <- req(int64(i))
	}
	close(reqs)
	h.planWaves(ctx, reqs, out, route, true)
	var prev *wave
	batch, carried, parts := int64(0), 0, 1
	for w := range out {
		if err := w.batch.failed(); err != nil {
			t.Fatal(err)
		}
		if id := w.batch.req.id; id != batch || (prev != nil && prev.batch == w.batch && w.index != prev.index+1) {
			if id != batch+1 || w.index != 0 || prev == nil || !prev.last {
				t.Fatalf("batch %d wave %d after batch %d", id, w.index, batch)
			}
			batch = id
		}
		if w.carried != (prev != nil && prev.joinsNext) {
			t.Fatalf("batch %d wave %d: carried %v after a wave with joinsNext %v", batch, w.index, w.carried, prev != nil && prev.joinsNext)
		}
		if w.carried {
			carried++
			if parts++; parts > maxWaveParts {
				t.Fatalf("%d batches share a wave", parts)
			}
			if w.slabAt != prev.slabEnd || w.arenaAt != prev.arena {
				t.Fatalf("carried wave starts at %d/%d, the wave it joins ends at %d/%d", w.slabAt, w.arenaAt, prev.slabEnd, prev.arena)
			}
		} else {
			parts = 1
		}
		prev = w
	}
	if batch != n-1 || !prev.last || prev.joinsNext {
		t.Fatalf("the waves end with batch %d (last %v, joinsNext %v)", batch, prev.last, prev.joinsNext)
	}
	if carried == 0 {
		t.Fatal("no batch joined the wave before")
	}
	t.Logf("%d of %d batches joined the wave before", carried, n-1)
}
