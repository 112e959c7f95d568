package cuda

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// UUID mirrors CUuuid in cuda.h: the 16 bytes that name a GPU (or, in MIG
// mode, a MIG instance) independently of CUDA_VISIBLE_DEVICES and of the
// ordinals a process sees.
type UUID [16]byte

// String formats u as nvidia-smi and NVML do:
// GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, lowercase hex.
func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ParseUUID parses the form String writes. The "GPU-" (or "MIG-") prefix
// is optional and hex digits may be of either case.
func ParseUUID(s string) (UUID, error) {
	rest := s
	if len(rest) >= 4 && (strings.EqualFold(rest[:4], "GPU-") || strings.EqualFold(rest[:4], "MIG-")) {
		rest = rest[4:]
	}
	var u UUID
	groups := strings.Split(rest, "-")
	if len(groups) != 5 || len(groups[0]) != 8 || len(groups[1]) != 4 || len(groups[2]) != 4 || len(groups[3]) != 4 || len(groups[4]) != 12 {
		return UUID{}, errors.New("cuda: bad GPU UUID " + strconv.Quote(s) + ": want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
	}
	if _, err := hex.Decode(u[:], []byte(strings.Join(groups, ""))); err != nil {
		return UUID{}, errors.New("cuda: bad GPU UUID " + strconv.Quote(s) + ": " + err.Error())
	}
	return u, nil
}

// UUID returns the device's UUID. It wraps cuDeviceGetUuid_v2, which
// cuda.h's cuDeviceGetUuid names since CUDA 11.4 (in MIG mode it gives
// the MIG instance's UUID, as the CUDA runtime and PyTorch do).
func (dev Device) UUID() (UUID, error) {
	d, err := api()
	if err != nil {
		return UUID{}, err
	}
	var u UUID
	if err := check("cuDeviceGetUuid_v2", d.cuDeviceGetUuid_v2(&u, dev)); err != nil {
		return UUID{}, err
	}
	return u, nil
}
