package zarr

import (
	"encoding/json"
	"errors"

	"github.com/damacy-go/damacy/zarr/blosc"
)

func init() {
	registerCodec("blosc", parseBlosc)
	registerCodec("numcodecs.blosc", parseBlosc)
}

// bloscCodec is blosc1 (zarr v3 "blosc", numcodecs "blosc"). Decoding
// needs nothing from the configuration: the chunk header says everything.
type bloscCodec struct{}

func (bloscCodec) codecName() string        { return "blosc" }
func (bloscCodec) compression() Compression { return CompressionBlosc }

func parseBlosc(spec codecSpec, in chunkSpec) (codec, error) {
	var cfg struct {
		Cname     *string         `json:"cname"`
		Clevel    *int            `json:"clevel"`
		Shuffle   json.RawMessage `json:"shuffle"` // v3: a name; numcodecs: -1, 0, 1 or 2
		Typesize  *int            `json:"typesize"`
		Blocksize *int            `json:"blocksize"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	if cfg.Cname != nil {
		if _, err := blosc.ParseCompressor(*cfg.Cname); err != nil {
			return nil, unsupported("blosc cname %q", *cfg.Cname)
		}
	}
	if cfg.Clevel != nil && (*cfg.Clevel < 0 || *cfg.Clevel > 9) {
		return nil, malformed("blosc clevel %d is outside 0..9", *cfg.Clevel)
	}
	if cfg.Typesize != nil && (*cfg.Typesize < 1 || *cfg.Typesize > blosc.MaxTypesize) {
		return nil, malformed("blosc typesize %d is outside 1..%d", *cfg.Typesize, blosc.MaxTypesize)
	}
	if cfg.Blocksize != nil && *cfg.Blocksize < 0 {
		return nil, malformed("blosc blocksize %d is negative", *cfg.Blocksize)
	}
	if cfg.Shuffle != nil {
		var name string
		var code int
		switch {
		case json.Unmarshal(cfg.Shuffle, &name) == nil:
			if name != "noshuffle" && name != "shuffle" && name != "bitshuffle" {
				return nil, malformed("blosc shuffle %q is not noshuffle, shuffle or bitshuffle", name)
			}
		case json.Unmarshal(cfg.Shuffle, &code) == nil:
			if code < -1 || code > 2 {
				return nil, malformed("blosc shuffle %d is outside -1..2", code)
			}
		default:
			return nil, malformed("blosc shuffle %s is neither a name nor a code", cfg.Shuffle)
		}
	}
	return bloscCodec{}, nil
}

func (bloscCodec) decode(_ *Decoder, dst, src []byte) (int, error) {
	h, err := blosc.ParseHeader(src)
	if err != nil {
		return 0, bloscReason(err)
	}
	if h.Nbytes > len(dst) {
		return 0, errShortDst
	}
	n, err := blosc.Decode(dst, src)
	if err != nil {
		return 0, bloscReason(err)
	}
	return n, nil
}

func (bloscCodec) sizeHint(src []byte) (int, bool) {
	h, err := blosc.ParseHeader(src)
	if err != nil {
		return 0, false
	}
	return h.Nbytes, true
}

func bloscReason(err error) error {
	if errors.Is(err, blosc.ErrUnsupported) {
		return &reason{kind: ErrUnsupported, cause: err}
	}
	return &reason{kind: ErrCorrupt, cause: err} // its message starts "blosc: "
}
