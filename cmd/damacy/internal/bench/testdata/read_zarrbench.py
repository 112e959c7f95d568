"""Read arrays of the zarrbench-* scenarios with zarr-python and compare them
with the public zarr benchmark's values, as its generate_benchmark_array.py
computes them (numpy, row by row), and their codecs with its own.

usage: read_zarrbench.py ARRAY:KIND...

Each ARRAY is a generated dataset's level-0 array (DIR/a000/0), KIND
"compressed" (blosc blosclz level 9, bit shuffle, typesize 2, inside
sharding or not) or "raw". Prints one line per array: "ok" or what went
wrong; exits 1 if any is wrong.
"""

import sys

import numpy as np
import zarr


def expected(shape):
    out = np.empty(shape, dtype=np.uint16)
    for z in range(shape[0]):
        for y in range(shape[1]):
            out[z, y] = np.fromfunction(
                lambda x: (x + y**2 / 32 + z**3) % 65536, shape=(shape[2],), dtype=np.uint16
            ).astype(np.uint16)
    return out


def blosc_codec(codecs):
    """The configuration of the blosc codec among codecs (dicts), looking
    inside sharding."""
    for d in codecs:
        if d["name"] == "sharding_indexed":
            return blosc_codec(d["configuration"]["codecs"])
        if d["name"] == "blosc":
            return d["configuration"]
    return None


def check(path, compressed):
    a = zarr.open_array(path, mode="r")
    if a.dtype != np.uint16:
        return "dtype %s" % a.dtype
    cfg = blosc_codec([c.to_dict() for c in a.metadata.codecs])
    if compressed:
        want = {"cname": "blosclz", "clevel": 9, "shuffle": "bitshuffle", "typesize": 2}
        got = {k: cfg[k] for k in want} if cfg else None
        if got != want:
            return "blosc configuration %s, want %s" % (got, want)
    elif cfg is not None:
        return "blosc configuration %s, want none" % cfg
    data = a[...]
    want = expected(a.shape)
    if not np.array_equal(data, want):
        at = np.argwhere(data != want)[0]
        return "element %s is %d, want %d" % (tuple(at), data[tuple(at)], want[tuple(at)])
    return "ok"


def main():
    bad = False
    for arg in sys.argv[1:]:
        path, kind = arg.rsplit(":", 1)
        try:
            r = check(path, kind == "compressed")
        except Exception as e:  # report, and go on with the next array
            r = "%s: %s" % (type(e).__name__, e)
        print(path, r)
        bad = bad or r != "ok"
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
