"""Check `damacy read` outputs against zarr-python.

    python readcheck.py DIR

DIR/manifest.json lists cases: {"name", "array" (a zarr array path),
"box" ([[start, stop], ...], may reach outside the array), "dtype"
("native", "f32" or "bf16"), "npy" (the file damacy wrote)}. Each box is
read with zarr-python (the part inside the array; the rest is the array's
fill value), converted as damacy documents (float32; bfloat16 as the
rounded-to-nearest-even upper 16 bits of float32, NaN as 0x7FFF, in a
uint16 array), and compared bit for bit with the .npy file read by numpy.
The results go to DIR/results.json: [{"name", "ok", "msg"}].
"""

import json
import os
import sys

import numpy as np
import zarr


def expected(case):
    a = zarr.open_array(case["array"], mode="r")
    box = case["box"]
    shape = tuple(hi - lo for lo, hi in box)
    out = np.full(shape, a.fill_value, dtype=a.dtype)
    src, dst = [], []
    for (lo, hi), n in zip(box, a.shape):
        s0, s1 = max(lo, 0), min(hi, n)
        if s0 >= s1:
            return out.astype(a.dtype.newbyteorder("<"))
        src.append(slice(s0, s1))
        dst.append(slice(s0 - lo, s1 - lo))
    out[tuple(dst)] = a[tuple(src)]
    return out.astype(a.dtype.newbyteorder("<"))


def convert(x, dtype):
    if dtype == "native":
        return x
    f = x.astype(np.float32)
    if dtype == "f32":
        return f
    u = f.view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    r[np.isnan(f)] = 0x7FFF
    return r


def check(case):
    want = convert(expected(case), case["dtype"])
    got = np.load(case["npy"])
    if got.dtype != want.dtype or got.shape != want.shape:
        return "got %s %s, want %s %s" % (got.dtype, got.shape, want.dtype, want.shape)
    gb = got.view(np.uint8) if got.dtype != np.bool_ else got
    wb = want.view(np.uint8) if want.dtype != np.bool_ else want
    if not np.array_equal(gb, wb):
        bad = np.argwhere(got.view(np.uint8).reshape(got.shape + (-1,)) != want.view(np.uint8).reshape(want.shape + (-1,)))
        i = tuple(bad[0][:-1])
        return "differs at %s: got %r, want %r" % (i, got[i], want[i])
    return ""


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        cases = json.load(f)
    results = []
    for c in cases:
        try:
            msg = check(c)
        except Exception as e:  # report, do not stop: the Go test prints them all
            msg = "%s: %s" % (type(e).__name__, e)
        results.append({"name": c["name"], "ok": msg == "", "msg": msg})
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
