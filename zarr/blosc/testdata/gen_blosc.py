"""Write blosc1 chunks made by numcodecs and tensorstore, with their input.

usage: gen_blosc.py OUTDIR SEED

OUTDIR receives NAME.blosc (the chunk), NAME.raw (the bytes it encodes) and
manifest.json, a list of {name, writer, cname, clevel, shuffle, typesize,
blocksize, nbytes}. Every cname (snappy through tensorstore, whose c-blosc
has it; numcodecs' has not), every shuffle, typesizes 1, 2, 3, 4, 8, 16,
requested blocksizes that leave partial last blocks, inputs shorter than
128 bytes, and incompressible, smooth and long-distance-repeat data, and
the public zarr benchmark's values.
"""

import json
import os
import sys

import numpy as np
import numcodecs
from numcodecs import Blosc, blosc
import tensorstore as ts


def data(rng, kind, nbytes, typesize):
    if kind == "random":
        return rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    if kind == "smooth":
        # Slowly varying little-endian integers: the high bytes repeat, so
        # shuffles matter; low bytes carry noise.
        n = nbytes // typesize + 1
        steps = rng.integers(-3, 4, n)
        vals = [int(v) for v in np.cumsum(steps) + int(rng.integers(0, 1 << 20))]
        mod = 1 << (8 * typesize)
        return b"".join((v % mod).to_bytes(typesize, "little") for v in vals)[:nbytes]
    if kind == "far":
        # A random snippet recurs ~9 KiB apart: the repeats are only reachable
        # with blosclz's far-distance matches (distance >= 8192).
        snippet = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
        ramp = bytes((i // 37) % 251 for i in range(9000))
        out = bytearray()
        while len(out) < nbytes:
            out += snippet + ramp
        return bytes(out[:nbytes])
    if kind == "zarrbench":
        # The public zarr benchmark's uint16 values, (x + y^2/32 + z^3) %
        # 65536, over planes of 256 x 256 from a random z.
        n = nbytes // 2
        i = np.arange(n, dtype=np.int64)
        z, y, x = i // 65536 + int(rng.integers(0, 1024)), i // 256 % 256, i % 256
        return ((x + y * y // 32 + z**3) % 65536).astype("<u2").tobytes()
    raise ValueError(kind)


def dtype_for(typesize):
    return np.dtype("u%d" % typesize) if typesize in (1, 2, 4, 8) else np.dtype("V%d" % typesize)


def main():
    outdir, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    os.makedirs(outdir, exist_ok=True)
    # Several threads, so c-blosc may write blocks in completion order.
    blosc.set_nthreads(4)
    manifest = []

    def emit(name, writer, cname, clevel, shuffle, typesize, blocksize, raw, frame):
        with open(os.path.join(outdir, name + ".blosc"), "wb") as f:
            f.write(frame)
        with open(os.path.join(outdir, name + ".raw"), "wb") as f:
            f.write(raw)
        manifest.append(dict(name=name, writer=writer, cname=cname, clevel=clevel, shuffle=shuffle,
                             typesize=typesize, blocksize=blocksize, nbytes=len(raw)))

    cases = []
    for cname in ["blosclz", "lz4", "lz4hc", "zlib", "zstd"]:
        for shuffle in [0, 1, 2]:
            for typesize in [1, 2, 3, 4, 8, 16]:
                for kind, nelem, blocksize, clevel in [
                    ("smooth", 20, 0, 5),  # < 128 bytes for typesize <= 4: memcpyed
                    ("smooth", 1237, 512, 5),  # partial last block
                    ("smooth", 3001, 0, 9),
                    ("random", 700, 1024, 1),
                    ("smooth", 4099, 2048, 3),
                ]:
                    cases.append((cname, shuffle, typesize, kind, nelem * typesize, blocksize, clevel))
        cases.append((cname, 0, 1, "far", 40000, 0, 5))
        cases.append((cname, 0, 1, "far", 40000, 0, 9))
        cases.append((cname, 1, 4, "smooth", 300000, 0, 5))
        # The zarr benchmark's chunks: 32^3 and 16 planes of 256^2, with
        # its codec (bit shuffle, level 9) and byte shuffle.
        for shuffle in [1, 2]:
            cases.append((cname, shuffle, 2, "zarrbench", 65536, 0, 9))
            cases.append((cname, shuffle, 2, "zarrbench", 2 << 20, 0, 9))
    for cname, shuffle, typesize, kind, nbytes, blocksize, clevel in cases:
        raw = data(rng, kind, nbytes, typesize)
        codec = Blosc(cname=cname, clevel=clevel, shuffle=shuffle, blocksize=blocksize)
        frame = codec.encode(np.frombuffer(raw, dtype=dtype_for(typesize)))
        name = "nc-%s-s%d-t%d-%s-n%d-b%d-l%d" % (cname, shuffle, typesize, kind, nbytes, blocksize, clevel)
        emit(name, "numcodecs", cname, clevel, shuffle, typesize, blocksize, raw, bytes(frame))

    # tensorstore: every cname, snappy above all, through one-chunk zarr v2
    # arrays; the chunk file is the blosc chunk.
    nosync = ts.Context({"file_io_sync": False})
    tsdtypes = {1: "|u1", 2: "<u2", 4: "<u4", 8: "<u8", 16: "<c16"}
    for cname in ["snappy", "lz4", "zstd", "blosclz", "zlib", "lz4hc"]:
        for shuffle in [0, 1, 2]:
            for typesize in [1, 2, 4, 8, 16]:
                for kind, nelem, blocksize in [("smooth", 24, 0), ("smooth", 2001, 0), ("smooth", 3001, 1024), ("random", 600, 0)]:
                    nbytes = nelem * typesize
                    raw = data(rng, kind, nbytes, typesize)
                    name = "ts-%s-s%d-t%d-%s-n%d-b%d" % (cname, shuffle, typesize, kind, nbytes, blocksize)
                    path = os.path.join(outdir, "ts-work", name)
                    arr = ts.open({
                        "driver": "zarr",
                        "kvstore": {"driver": "file", "path": path},
                        "metadata": {"shape": [nelem], "chunks": [nelem], "dtype": tsdtypes[typesize],
                                     "compressor": {"id": "blosc", "cname": cname, "clevel": 5,
                                                    "shuffle": shuffle, "blocksize": blocksize}},
                    }, create=True, delete_existing=True, context=nosync).result()
                    arr.write(np.frombuffer(raw, dtype=np.dtype(tsdtypes[typesize]))).result()
                    with open(os.path.join(path, "0"), "rb") as f:
                        frame = f.read()
                    emit(name, "tensorstore", cname, 5, shuffle, typesize, blocksize, raw, frame)

    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print("wrote %d chunks (numcodecs %s, c-blosc %s)" % (len(manifest), numcodecs.__version__, blosc.VERSION_STRING))


if __name__ == "__main__":
    main()
