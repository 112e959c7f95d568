package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

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

// configOf decodes hello's config (pipeline.Config's JSON names, which
// are the Python client's) with the pipeline's one decoder.
func configOf(raw map[string]json.RawMessage) (pipeline.Config, error) {
	if raw == nil {
		return pipeline.Config{}, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return pipeline.Config{}, statusErrorf(statusInval, "config: %v", err)
	}
	return pipeline.DecodeConfig(b)
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
