package pipeline

// newEngine picks the engine Config.Device asks for.
func newEngine(cfg Config, stats *statsSink) (engine, error) {
	kind, _, _ := parseDevice(cfg.Device)
	switch kind {
	case deviceHost, deviceAuto:
		return newHostEngine(cfg, stats)
	}
	return nil, errorf("new", ErrCUDA, "", "Config.Device = %q: the CUDA engine is not built yet", cfg.Device)
}
