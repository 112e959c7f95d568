package serve

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
)

// hello checks the version, makes the pipeline and starts the popper.
func (s *server) hello(id int64, req *request) {
	if s.p != nil {
		s.fail(id, "hello", statusErrorf(statusInval, "hello was already received"), nil)
		return
	}
	if req.Version == nil || *req.Version != protocolVersion {
		v := "none"
		if req.Version != nil {
			v = fmt.Sprint(*req.Version)
		}
		s.fail(id, "hello", statusErrorf(statusInval, "protocol version %s: this server speaks version %d", v, protocolVersion), nil)
		return
	}
	cfg, err := configOf(req.Config)
	if err != nil {
		s.fail(id, "hello", err, nil)
		return
	}
	cfg.Logger = s.log
	var dev map[string]any
	if cfg.Device, dev, err = deviceOf(req.Device); err != nil {
		s.fail(id, "hello", err, nil)
		return
	}
	p, err := pipeline.New(cfg)
	if err != nil {
		s.fail(id, "hello", err, nil)
		return
	}
	st := p.Stats()
	s.p, s.cuda = p, st.Engine == "cuda"
	if s.cuda {
		if dev == nil { // the default device: GPU 0
			if _, dev, err = deviceOf(&deviceSpec{Kind: "cuda"}); err != nil {
				p.Close()
				s.p = nil
				s.fail(id, "hello", err, nil)
				return
			}
		}
		s.ordinal = dev["ordinal"].(int)
	} else {
		dev = nil
	}
	slots := cfg.BatchSlots
	if slots == 0 {
		slots = pipeline.DefaultBatchSlots
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.pops, s.popCancel, s.popDone = make(chan int64, 64), cancel, make(chan struct{})
	go s.popper(ctx)
	engine := "host"
	if s.cuda {
		engine = "cuda"
	}
	s.reply(id, map[string]any{
		"version": protocolVersion, "server": "damacy " + buildVersion(), "engine": engine, "device": dev,
		"decoder": st.Decoder, "slots": slots, "pid": os.Getpid(),
	}, nil)
}

// buildVersion is the module version the binary was built from, with its
// VCS revision when known.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, kv := range bi.Settings {
		if kv.Key == "vcs.revision" && len(kv.Value) >= 12 {
			v += " " + kv.Value[:12]
		}
	}
	return v
}

// configOf maps hello's config (the seed's names) onto a pipeline.Config.
func configOf(raw map[string]json.RawMessage) (pipeline.Config, error) {
	var cfg pipeline.Config
	ints := map[string]*int{
		"batch_size":            &cfg.BatchSize,
		"lookahead_batches":     &cfg.LookaheadBatches,
		"n_io_threads":          &cfg.IOThreads,
		"n_compute_threads":     &cfg.ComputeThreads,
		"n_zarrs_meta_cache":    &cfg.ZarrMetaCache,
		"n_shards_meta_cache":   &cfg.ShardIndexCache,
		"max_bytes_per_element": &cfg.MaxBytesPerElement,
		"batch_slots":           &cfg.BatchSlots,
	}
	int64s := map[string]*int64{
		"host_buffer_bytes":            &cfg.HostBufferBytes,
		"device_buffer_bytes":          &cfg.DeviceBufferBytes,
		"max_chunk_uncompressed_bytes": &cfg.MaxChunkBytes,
		"max_gpu_memory_bytes":         &cfg.MaxGPUMemoryBytes,
		"chunk_cache_bytes":            &cfg.ChunkCacheBytes,
	}
	var unknown []string
	for k := range raw {
		if ints[k] == nil && int64s[k] == nil && k != "dtype" && k != "sample_shape" && k != "mapped_file_bytes" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return cfg, statusErrorf(statusInval, "unknown config keys: %s", strings.Join(unknown, ", "))
	}
	bad := func(k string, v json.RawMessage, want string) error {
		return statusErrorf(statusInval, "config.%s = %s: must be %s", k, v, want)
	}
	for k, v := range raw {
		switch {
		case ints[k] != nil:
			if json.Unmarshal(v, ints[k]) != nil || *ints[k] < 0 {
				return cfg, bad(k, v, "an integer >= 0 (0: the default)")
			}
		case int64s[k] != nil:
			if json.Unmarshal(v, int64s[k]) != nil || *int64s[k] < 0 {
				return cfg, bad(k, v, "an integer >= 0 (0: the default)")
			}
		case k == "dtype":
			var name string
			if json.Unmarshal(v, &name) != nil {
				return cfg, bad(k, v, `"f32" or "bf16"`)
			}
			if name == "" {
				continue
			}
			dt, err := pipeline.ParseDtype(name)
			if err != nil {
				return cfg, err
			}
			cfg.Dtype = dt
		case k == "mapped_file_bytes":
			if json.Unmarshal(v, &cfg.MappedFileBytes) != nil || cfg.MappedFileBytes < -1 {
				return cfg, bad(k, v, "an integer >= -1 (0: the default, -1: none)")
			}
		case k == "sample_shape":
			if json.Unmarshal(v, &cfg.SampleShape) != nil {
				return cfg, bad(k, v, "a list of positive integers")
			}
		}
	}
	return cfg, nil
}

// deviceOf maps hello's device onto Config.Device and, for a GPU, the
// response's device description. A GPU is named by UUID, so that the
// client's and the server's CUDA_VISIBLE_DEVICES may differ.
func deviceOf(d *deviceSpec) (string, map[string]any, error) {
	if d == nil {
		return "", nil, nil // the pipeline's default: GPU 0 when there is one
	}
	switch d.Kind {
	case "cpu":
		return "cpu", nil, nil
	case "cuda":
	default:
		return "", nil, statusErrorf(statusInval, "device.kind %q: want \"cuda\" or \"cpu\"", d.Kind)
	}
	var want cuda.UUID
	if d.UUID != "" {
		var err error
		if want, err = cuda.ParseUUID(d.UUID); err != nil {
			return "", nil, statusErrorf(statusInval, "device.uuid: %v", err)
		}
	}
	if err := cuda.Init(); err != nil {
		return "", nil, statusErrorf(statusCUDA, "device %s: %v", d.UUID, err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return "", nil, statusErrorf(statusCUDA, "device %s: %v", d.UUID, err)
	}
	for i := range n {
		dev, err := cuda.GetDevice(i)
		if err != nil {
			return "", nil, statusErrorf(statusCUDA, "device %d: %v", i, err)
		}
		u, err := dev.UUID()
		if err != nil {
			return "", nil, statusErrorf(statusCUDA, "device %d: %v", i, err)
		}
		if d.UUID != "" && u != want {
			continue
		}
		name, err := dev.Name()
		if err != nil {
			return "", nil, statusErrorf(statusCUDA, "device %d: %v", i, err)
		}
		return fmt.Sprintf("cuda:%d", i), map[string]any{"ordinal": i, "uuid": u.String(), "name": name}, nil
	}
	if d.UUID == "" {
		return "", nil, statusErrorf(statusNotFound, "no CUDA device")
	}
	return "", nil, statusErrorf(statusNotFound, "no GPU with UUID %s among the %d this process sees (CUDA_VISIBLE_DEVICES=%q)", d.UUID, n, os.Getenv("CUDA_VISIBLE_DEVICES"))
}

// push checks and queues the samples in order; the first bad one fails
// the request with its index, those before it stay queued.
func (s *server) push(id int64, req *request) {
	for i, sp := range req.Samples {
		smp := pipeline.Sample{URI: sp.URI, Level: sp.Level, Box: make([]pipeline.Range, len(sp.Box))}
		var err error
		for k, r := range sp.Box {
			if len(r) != 2 {
				err = statusErrorf(statusInval, "sample %d: box axis %d has %d bounds, want [start, stop]", i, k, len(r))
				break
			}
			smp.Box[k] = pipeline.Range{Start: r[0], Stop: r[1]}
		}
		if err == nil {
			err = s.p.Check(smp)
		}
		if err == nil {
			err = s.p.Push(smp)
		}
		if err != nil {
			s.fail(id, "push", err, &i)
			return
		}
	}
	s.reply(id, map[string]any{"accepted": len(req.Samples)}, nil)
}

// popper answers pop requests in order, one Pop at a time, so that the
// main loop keeps reading (releases, close) while a Pop blocks. When ctx
// ends it answers every pop left with SHUTDOWN.
func (s *server) popper(ctx context.Context) {
	defer close(s.popDone)
	for id := range s.pops {
		if ctx.Err() != nil {
			s.fail(id, "pop", statusErrorf(statusShutdown, "the server is closing"), nil)
			continue
		}
		b, err := s.p.Pop(ctx)
		if err == nil && ctx.Err() != nil {
			b.Release()
			err = statusErrorf(statusShutdown, "the server is closing")
		}
		if err != nil {
			s.fail(id, "pop", err, nil)
			continue
		}
		msg, fds, err := s.describe(b)
		if err != nil {
			b.Release()
			s.fail(id, "pop", err, nil)
			continue
		}
		s.mu.Lock()
		s.held[msg.ID] = b
		s.mu.Unlock()
		// "fds" also at the frame's top level: the framing rule.
		fields := map[string]any{"batch": msg}
		if len(fds) > 0 {
			fields["fds"] = len(fds)
		}
		s.reply(id, fields, fds)
	}
}

// describe makes a batch's BATCH message and the descriptors to send
// with it (a host slot's memfd, the first time).
func (s *server) describe(b *pipeline.Batch) (batchMsg, []int, error) {
	info := b.Info()
	sh, err := b.Share()
	if err != nil {
		return batchMsg{}, nil, err
	}
	m := batchMsg{ID: info.ID, Slot: sh.Slot, N: b.Len(), Shape: info.Shape, Dtype: "f32", NBytes: sh.Bytes}
	if info.Dtype == pipeline.BF16 {
		m.Dtype = "bf16"
	}
	if s.cuda {
		m.CUDA = &cudaSlot{MemHandle: hex.EncodeToString(sh.Mem.Reserved[:]), Offset: sh.Offset, EventHandle: hex.EncodeToString(sh.Ready.Reserved[:])}
		return m, nil, nil
	}
	m.Host = &hostSlot{Size: sh.Size, Offset: sh.Offset}
	if s.fdSent[sh.Slot] {
		return m, nil, nil
	}
	s.fdSent[sh.Slot] = true
	m.FDs = 1
	return m, []int{sh.FD}, nil
}

// release gives a batch back, after the client's event when it sends one.
func (s *server) release(req *request) {
	if req.Batch == nil {
		s.log.Warn("release without a batch: ignored")
		return
	}
	s.mu.Lock()
	b := s.held[*req.Batch]
	delete(s.held, *req.Batch)
	s.mu.Unlock()
	if b == nil {
		s.log.Warn("release of a batch the client does not hold: ignored", "batch", *req.Batch)
		return
	}
	if req.EventHandle == "" || !s.cuda {
		b.Release()
		return
	}
	ev, err := s.clientEvent(req.EventHandle)
	if err != nil {
		// Reusing the slot unordered could overwrite what the client is
		// still reading: keep it until close.
		s.mu.Lock()
		s.held[*req.Batch] = b
		s.mu.Unlock()
		s.log.Error("release: the client's event cannot be opened; the batch's slot stays in use until close", "batch", *req.Batch, "error", err)
		return
	}
	b.ReleaseAfter(ev)
}

// clientEvent opens (once) the client's interprocess event named by h.
func (s *server) clientEvent(h string) (cuda.Event, error) {
	var eh cuda.IPCEventHandle
	raw, err := hex.DecodeString(h)
	if err != nil || len(raw) != len(eh.Reserved) {
		return 0, fmt.Errorf("event_handle %q is not %d bytes of hex", h, len(eh.Reserved))
	}
	copy(eh.Reserved[:], raw)
	if ev, ok := s.events[eh]; ok {
		return ev, nil
	}
	if s.ex == nil {
		dev, err := cuda.GetDevice(s.ordinal)
		if err != nil {
			return 0, err
		}
		if s.ex, err = cuda.NewExecutor(dev); err != nil {
			return 0, err
		}
		s.events = map[cuda.IPCEventHandle]cuda.Event{}
	}
	var ev cuda.Event
	if err := s.ex.Do(func() (err error) { ev, err = cuda.OpenIPCEventHandle(eh); return err }); err != nil {
		return 0, err
	}
	s.events[eh] = ev
	return ev, nil
}

// closeEvents destroys the client's events once the pipeline is closed
// (no stream waits on them any more).
func (s *server) closeEvents() {
	if s.ex == nil {
		return
	}
	err := s.ex.Do(func() error {
		var errs []error
		for _, ev := range s.events {
			errs = append(errs, ev.Destroy())
		}
		return errors.Join(errs...)
	})
	if err != nil {
		s.log.Warn("destroying the client's events", "error", err)
	}
	s.ex.Close()
}
