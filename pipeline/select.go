package pipeline

import (
	"errors"

	"github.com/damacy-go/damacy/cuda"
)

// newEngine picks the engine Config.Device asks for: by default GPU 0 when a
// driver and a device are present, otherwise the host engine.
func newEngine(cfg Config, stats *statsSink) (engine, error) {
	kind, ordinal, _ := parseDevice(cfg.Device)
	switch kind {
	case deviceHost:
		return newHostEngine(cfg, stats)
	case deviceCUDA:
		return newCUDAEngine(cfg, ordinal, stats, true)
	}
	if err := cuda.Init(); err != nil {
		cfg.Logger.Info("damacy: no CUDA driver; using the host engine", "reason", err)
		return newHostEngine(cfg, stats)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		cfg.Logger.Info("damacy: no CUDA device; using the host engine", "reason", errors.Join(err))
		return newHostEngine(cfg, stats)
	}
	return newCUDAEngine(cfg, 0, stats, true)
}
