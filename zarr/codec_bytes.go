package zarr

func init() {
	registerCodec("bytes", parseBytesCodec)
	registerCodec("transpose", parseTransposeCodec)
}

// endianCodec is the "bytes" codec: elements in C order, in one byte order.
type endianCodec struct{ endian Endian }

func (c *endianCodec) codecName() string { return "bytes" }

func parseBytesCodec(spec codecSpec, in chunkSpec) (codec, error) {
	var cfg struct {
		Endian *string `json:"endian"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	if cfg.Endian == nil {
		if in.dtype.Size() > 1 {
			return nil, malformed("bytes codec without an endian for %s", in.dtype)
		}
		return &endianCodec{LittleEndian}, nil
	}
	switch *cfg.Endian {
	case "little":
		return &endianCodec{LittleEndian}, nil
	case "big":
		return &endianCodec{BigEndian}, nil
	}
	return nil, malformed("endian %q is neither \"little\" nor \"big\"", *cfg.Endian)
}

// transposeCodec permutes the axes: encoded axis i is input axis order[i].
type transposeCodec struct{ order []int }

func (c *transposeCodec) codecName() string { return "transpose" }

func parseTransposeCodec(spec codecSpec, in chunkSpec) (codec, error) {
	var cfg struct {
		Order []int `json:"order"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	if len(cfg.Order) != len(in.shape) {
		return nil, malformed("transpose order has %d entries for %d dimensions", len(cfg.Order), len(in.shape))
	}
	seen := make([]bool, len(cfg.Order))
	for _, o := range cfg.Order {
		if o < 0 || o >= len(seen) || seen[o] {
			return nil, malformed("transpose order %v is not a permutation", cfg.Order)
		}
		seen[o] = true
	}
	return &transposeCodec{order: cfg.Order}, nil
}
