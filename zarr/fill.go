package zarr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// parseFill converts a JSON fill value to one little-endian element of t.
// v2 selects zarr v2 rules: null means the type's zero.
func parseFill(raw json.RawMessage, t DataType, v2 bool) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	out := make([]byte, t.Size())
	if len(raw) == 0 || isNull(raw) {
		if v2 {
			return out, nil
		}
		return nil, malformed("fill_value is null")
	}
	var str string
	isStr := raw[0] == '"'
	if isStr {
		if err := json.Unmarshal(raw, &str); err != nil {
			return nil, jsonReason(err)
		}
	}
	lit := string(raw)
	switch {
	case t == Bool:
		switch {
		case lit == "true" || (v2 && lit == "1"):
			out[0] = 1
		case lit == "false" || (v2 && lit == "0"):
		default:
			return nil, malformed("fill_value %s is not a bool", lit)
		}
	case t.IsFloat():
		var bits uint64
		if isStr {
			switch {
			case str == "NaN":
				bits = nanBits(t)
			case str == "Infinity":
				bits = floatBits(t, math.Inf(1))
			case str == "-Infinity":
				bits = floatBits(t, math.Inf(-1))
			case !v2 && strings.HasPrefix(str, "0x") && len(str) > 2 && len(str) <= 2+2*t.Size():
				v, err := strconv.ParseUint(str[2:], 16, 64)
				if err != nil {
					return nil, malformed("fill_value %q is not a hex bit pattern", str)
				}
				bits = v
			default:
				return nil, malformed("fill_value %q is not a %s", str, t)
			}
		} else {
			if !isNumber(lit) {
				return nil, malformed("fill_value %s is not a number", lit)
			}
			size := 64
			if t == Float32 {
				size = 32 // parse straight to float32: one correctly rounded step
			}
			f, err := strconv.ParseFloat(lit, size)
			if err != nil && !isRangeErr(err) {
				return nil, malformed("fill_value %s is not a number", lit)
			}
			bits = floatBits(t, f)
		}
		putUint(out, bits)
	default: // integers
		if isStr || !isNumber(lit) {
			return nil, malformed("fill_value %s is not an integer", lit)
		}
		v, err := parseIntLiteral(lit, t)
		if err != nil {
			return nil, err
		}
		putUint(out, v)
	}
	return out, nil
}

// parseIntLiteral parses a JSON number as an integer of type t, returning
// its two's-complement bits. Integral floats ("3.0", "1e3") are accepted.
func parseIntLiteral(lit string, t DataType) (uint64, error) {
	bitsz := t.Size() * 8
	if t.IsSigned() {
		v, err := strconv.ParseInt(lit, 10, bitsz)
		if err == nil {
			return uint64(v), nil
		}
		if isRangeErr(err) {
			return 0, malformed("fill_value %s is out of range for %s", lit, t)
		}
	} else {
		v, err := strconv.ParseUint(lit, 10, bitsz)
		if err == nil {
			return v, nil
		}
		if isRangeErr(err) {
			return 0, malformed("fill_value %s is out of range for %s", lit, t)
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || f != math.Trunc(f) {
		return 0, malformed("fill_value %s is not an integer", lit)
	}
	lo, hi := intRange(t)
	if f < lo || f >= hi {
		return 0, malformed("fill_value %s is out of range for %s", lit, t)
	}
	if t.IsSigned() {
		return uint64(int64(f)), nil
	}
	return uint64(f), nil
}

// intRange returns [lo, hi) of integer type t as float64s (exact: powers
// of two).
func intRange(t DataType) (float64, float64) {
	bitsz := t.Size() * 8
	if t.IsSigned() {
		return -math.Ldexp(1, bitsz-1), math.Ldexp(1, bitsz-1)
	}
	return 0, math.Ldexp(1, bitsz)
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// isNumber reports whether lit is a JSON number literal.
func isNumber(lit string) bool {
	if lit == "" {
		return false
	}
	return lit[0] == '-' || (lit[0] >= '0' && lit[0] <= '9')
}

// floatBits returns the bits of f as float type t.
func floatBits(t DataType, f float64) uint64 {
	switch t {
	case Float16:
		return uint64(float16Bits(f))
	case Float32:
		return uint64(math.Float32bits(float32(f)))
	}
	return math.Float64bits(f)
}

// nanBits returns the positive quiet NaN of float type t, as "NaN" means.
func nanBits(t DataType) uint64 {
	switch t {
	case Float16:
		return 0x7e00
	case Float32:
		return 0x7fc00000
	}
	return 0x7ff8000000000000
}

// putUint stores the low len(b) bytes of v little-endian.
func putUint(b []byte, v uint64) {
	var tmp [8]byte
	binary.LittleEndian.PutUint64(tmp[:], v)
	copy(b, tmp[:len(b)])
}
