"""Writes blosc_shuffle.json into the directory given as the only argument.

Each case is a chunk of known data compressed by c-blosc (through numcodecs)
with byte or bit shuffle; the compressed streams are decoded here, without
unshuffling, so the case holds the decoded-but-still-shuffled bytes exactly
as c-blosc lays them out (leftover block included). The Go tests check their
forward shuffle and the assemble kernel's in-place unshuffle against them.
"""
import base64
import json
import os
import struct
import sys

import numpy as np
from numcodecs import Zstd, blosc

FLAG_SHUFFLE, FLAG_MEMCPYED, FLAG_BITSHUFFLE, FLAG_DONTSPLIT = 0x1, 0x2, 0x4, 0x10

# (name, numpy dtype, elements, blosc typesize, shuffle, requested blocksize)
CASES = [
    ("u2-byte", "<u2", 1500, 2, blosc.SHUFFLE, 1024),
    ("u2-bit", "<u2", 1500, 2, blosc.BITSHUFFLE, 1024),
    ("f4-byte", "<f4", 700, 4, blosc.SHUFFLE, 512),
    ("f4-bit", "<f4", 704, 4, blosc.BITSHUFFLE, 512),
    ("u8-byte", "<u8", 330, 8, blosc.SHUFFLE, 1024),
    ("f8-bit", ">f8", 330, 8, blosc.BITSHUFFLE, 1000),
    ("i1-bit", "|i1", 3001, 1, blosc.BITSHUFFLE, 1024),
    ("u2-byte-ts4", "<u2", 1501, 4, blosc.SHUFFLE, 1024),
    ("u2-bit-ts3", "<u2", 1501, 3, blosc.BITSHUFFLE, 960),
    ("i4-byte-ts8", ">i4", 777, 8, blosc.SHUFFLE, 1024),
]


def shuffled_streams(frame):
    """The decoded bytes of every block of a compressed blosc1 frame, still shuffled."""
    version, versionlz, flags, typesize, nbytes, blocksize, cbytes = struct.unpack_from("<BBBBIII", frame)
    assert version == 2 and not flags & FLAG_MEMCPYED, (version, flags)  # memcpyed: not shuffled
    assert flags & FLAG_DONTSPLIT and (flags >> 5) == 4, flags  # zstd: one stream per block
    nblocks = -(-nbytes // blocksize)
    starts = struct.unpack_from("<%di" % nblocks, frame, 16)
    out = bytearray()
    zstd = Zstd()
    for b, start in enumerate(starts):
        size = min(blocksize, nbytes - b * blocksize)
        (csize,) = struct.unpack_from("<i", frame, start)
        payload = bytes(frame[start + 4 : start + 4 + csize])
        block = payload if csize == size else zstd.decode(payload)
        assert len(block) == size, (b, len(block), size)
        out += block
    return flags, typesize, nbytes, blocksize, bytes(out)


def values(rng, dtype, n):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        # Smooth with small noise: compressible, yet every bit varies.
        x = np.cumsum(rng.normal(0, 1, n)) + rng.normal(0, 0.01, n)
        return x.astype(dt)
    info = np.iinfo(dt)
    r = 200 if dt.itemsize > 1 else 5
    lo, hi = max(info.min, -r), min(info.max, r)
    return rng.integers(lo, hi, n, endpoint=True).astype(dt)


def main(outdir):
    rng = np.random.default_rng(20260611)
    cases = []
    for name, dtype, n, typesize, shuffle, blocksize in CASES:
        data = values(rng, dtype, n).tobytes()
        frame = blosc.compress(data, b"zstd", 1, shuffle, blocksize, typesize=typesize)
        assert blosc.decompress(frame) == data, name
        flags, ts, nbytes, bs, shuffled = shuffled_streams(frame)
        want_flag = FLAG_SHUFFLE if shuffle == blosc.SHUFFLE else FLAG_BITSHUFFLE
        assert flags & want_flag and ts == typesize and nbytes == len(data), (name, flags, ts)
        cases.append({
            "name": name,
            "dtype": np.dtype(dtype).str,
            "typesize": ts,
            "blocksize": bs,
            "shuffle": "byte" if shuffle == blosc.SHUFFLE else "bit",
            "data": base64.b64encode(data).decode(),
            "shuffled": base64.b64encode(shuffled).decode(),
        })
    with open(os.path.join(outdir, "blosc_shuffle.json"), "w") as f:
        json.dump({"blosc": blosc.VERSION_STRING, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
