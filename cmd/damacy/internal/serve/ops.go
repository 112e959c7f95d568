package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
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
	s.slots, s.batchSize, s.check = cfg.BatchSlots, cfg.BatchSize, cfg.OnError == pipeline.OnErrorRaise
	if s.slots == 0 {
		s.slots = pipeline.DefaultBatchSlots
	}
	if s.batchSize == 0 {
		s.batchSize = pipeline.DefaultBatchSize
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.pops, s.popCancel, s.popDone = make(chan int64, 64), cancel, make(chan struct{})
	go s.popper(ctx)
	engine := "host"
	if s.cuda {
		engine = "cuda"
	}
	s.reply(id, map[string]any{
		"version": protocolVersion, "server": "damacy " + s.version, "engine": engine, "device": dev,
		"decoder": st.Decoder, "slots": s.slots, "pid": os.Getpid(),
	}, nil)
}

// configKey is one of hello's integer config keys: its name, as the
// Python client's Config spells it, and the pipeline.Config field it sets.
type configKey struct {
	wire  string
	field string
	ptr   any // *int or *int64, into the Config configKeys was given
}

// configKeys lists hello's integer config keys, pointing into cfg.
// configOf reads them; pythonNames renames their fields in the pipeline's
// messages.
func configKeys(cfg *pipeline.Config) []configKey {
	return []configKey{
		{"batch_size", "BatchSize", &cfg.BatchSize},
		{"lookahead_batches", "LookaheadBatches", &cfg.LookaheadBatches},
		{"n_io_threads", "IOThreads", &cfg.IOThreads},
		{"n_compute_threads", "ComputeThreads", &cfg.ComputeThreads},
		{"n_zarrs_meta_cache", "ZarrMetaCache", &cfg.ZarrMetaCache},
		{"n_shards_meta_cache", "ShardIndexCache", &cfg.ShardIndexCache},
		{"max_bytes_per_element", "MaxBytesPerElement", &cfg.MaxBytesPerElement},
		{"batch_slots", "BatchSlots", &cfg.BatchSlots},
		{"io_concurrency", "IOConcurrency", &cfg.IOConcurrency},
		{"host_buffer_bytes", "HostBufferBytes", &cfg.HostBufferBytes},
		{"device_buffer_bytes", "DeviceBufferBytes", &cfg.DeviceBufferBytes},
		{"max_chunk_uncompressed_bytes", "MaxChunkBytes", &cfg.MaxChunkBytes},
		{"max_gpu_memory_bytes", "MaxGPUMemoryBytes", &cfg.MaxGPUMemoryBytes},
		{"chunk_cache_bytes", "ChunkCacheBytes", &cfg.ChunkCacheBytes},
		{"remote_gap_bytes", "RemoteGapBytes", &cfg.RemoteGapBytes},
		{"remote_span_bytes", "RemoteSpanBytes", &cfg.RemoteSpanBytes},
	}
}

// configOf maps hello's config (the seed's names) onto a pipeline.Config.
func configOf(raw map[string]json.RawMessage) (pipeline.Config, error) {
	var cfg pipeline.Config
	ints := map[string]*int{}
	int64s := map[string]*int64{}
	for _, k := range configKeys(&cfg) {
		switch p := k.ptr.(type) {
		case *int:
			ints[k.wire] = p
		case *int64:
			int64s[k.wire] = p
		}
	}
	var unknown []string
	for k := range raw {
		if ints[k] == nil && int64s[k] == nil && k != "dtype" && k != "sample_shape" && k != "mapped_file_bytes" && k != "sources" && k != "augment" && k != "on_error" {
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
		case k == "on_error":
			var name string
			if json.Unmarshal(v, &name) != nil {
				return cfg, bad(k, v, `"raise" or "skip"`)
			}
			policy, err := pipeline.ParseErrorPolicy(name)
			if err != nil {
				return cfg, bad(k, v, `"raise" or "skip"`)
			}
			cfg.OnError = policy
		case k == "mapped_file_bytes":
			if json.Unmarshal(v, &cfg.MappedFileBytes) != nil || cfg.MappedFileBytes < -1 {
				return cfg, bad(k, v, "an integer >= -1 (0: the default, -1: none)")
			}
		case k == "sample_shape":
			if json.Unmarshal(v, &cfg.SampleShape) != nil {
				return cfg, bad(k, v, "a list of positive integers")
			}
		case k == "augment":
			a, err := augmentOf(v)
			if err != nil {
				return cfg, err
			}
			cfg.Augment = a
		case k == "sources":
			srcs, err := sourcesOf(v)
			if err != nil {
				return cfg, err
			}
			cfg.Sources = srcs
		}
	}
	return cfg, nil
}

// sourceSpec is one entry of hello's config.sources.
type sourceSpec struct {
	Name              string `json:"name"`
	Path              string `json:"path"`
	Label             string `json:"label"`
	Dtype             string `json:"dtype"`
	HostBufferBytes   int64  `json:"host_buffer_bytes"`
	DeviceBufferBytes int64  `json:"device_buffer_bytes"`
}

// sourcesOf maps config.sources onto pipeline Sources (which New
// validates).
func sourcesOf(v json.RawMessage) ([]pipeline.Source, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	var specs []sourceSpec
	if err := dec.Decode(&specs); err != nil {
		return nil, statusErrorf(statusInval, "config.sources = %s: must be a list of {name, path, label, dtype, host_buffer_bytes, device_buffer_bytes}: %v", v, err)
	}
	out := make([]pipeline.Source, len(specs))
	for i, sp := range specs {
		out[i] = pipeline.Source{Name: sp.Name, Path: sp.Path, Label: sp.Label,
			HostBufferBytes: sp.HostBufferBytes, DeviceBufferBytes: sp.DeviceBufferBytes}
		if sp.Dtype != "" {
			dt, err := pipeline.ParseDtype(sp.Dtype)
			if err != nil {
				return nil, statusErrorf(statusInval, "config.sources[%d].dtype: %v", i, err)
			}
			out[i].Dtype = dt
		}
	}
	return out, nil
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
// the request with its index, those before it stay queued. Each sample
// queued counts towards the batches pops can take. Arrays are opened
// (Pipeline.Check) under config.on_error "raise" unless the request says
// "check": false; otherwise a sample that cannot be read fails its batch
// (raise) or is left out of it (skip), at pop.
func (s *server) push(id int64, req *request) {
	check := s.check && (req.Check == nil || *req.Check)
	for i, sp := range req.Samples {
		smp := pipeline.Sample{URI: sp.URI, Level: sp.Level, Seed: sp.Seed, Box: make([]pipeline.Range, len(sp.Box))}
		var err error
		for k, r := range sp.Box {
			if len(r) != 2 {
				err = statusErrorf(statusInval, "sample %d: box axis %d has %d bounds, want [start, stop]", i, k, len(r))
				break
			}
			smp.Box[k] = pipeline.Range{Start: r[0], Stop: r[1]}
		}
		if err == nil && check {
			err = s.p.Check(smp)
		}
		if err == nil {
			err = s.p.Push(smp)
		}
		if err != nil {
			s.fail(id, "push", err, &i)
			return
		}
		s.mu.Lock()
		if s.partial++; s.partial == s.batchSize {
			s.formed++
			s.partial = 0
		}
		s.mu.Unlock()
	}
	s.reply(id, map[string]any{"accepted": len(req.Samples)}, nil)
}

// flush ends the batch being filled: the samples pushed since the last
// complete batch make a (ragged) batch of their own.
func (s *server) flush(id int64) {
	if err := s.p.Flush(); err != nil {
		s.fail(id, "flush", err, nil)
		return
	}
	s.mu.Lock()
	if s.partial > 0 {
		s.formed++
		s.partial = 0
	}
	s.mu.Unlock()
	s.reply(id, nil, nil)
}
