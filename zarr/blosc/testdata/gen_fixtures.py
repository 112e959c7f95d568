"""Write the small committed blosc1 fixtures: chunks made by numcodecs and
tensorstore, with the SHA-256 of the bytes each decodes to.

usage: gen_fixtures.py OUTDIR    (the committed set lives in testdata/fixtures)

The seed is fixed, so reruns with the same library versions give the same
inputs; the chunks may still differ if the codec libraries change.
"""

import hashlib
import json
import os
import shutil
import sys

import numpy as np
import numcodecs
from numcodecs import Blosc, blosc
import tensorstore as ts

from gen_blosc import data, dtype_for


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(20261121)
    blosc.set_nthreads(1)
    fixtures = []

    def emit(name, writer, note, raw, frame):
        with open(os.path.join(outdir, name + ".blosc"), "wb") as f:
            f.write(frame)
        fixtures.append(dict(name=name, writer=writer, note=note, nbytes=len(raw),
                             sha256=hashlib.sha256(raw).hexdigest()))

    # (cname, shuffle, typesize, kind, nbytes, blocksize, clevel, note)
    cases = [
        ("blosclz", 0, 1, "far", 20000, 0, 5, "far matches (distance >= 8192), one stream"),
        ("blosclz", 1, 4, "smooth", 2000, 512, 5, "byte shuffle, 4 streams per block, shorter last block"),
        ("blosclz", 2, 2, "smooth", 2048, 1024, 5, "bitshuffle, split blocks"),
        ("blosclz", 1, 3, "smooth", 1500, 0, 5, "typesize 3"),
        ("blosclz", 1, 32, "smooth", 4096, 0, 5, "typesize 32: never split"),
        ("lz4", 1, 2, "smooth", 2000, 0, 5, "lz4, byte shuffle, split"),
        ("lz4hc", 2, 8, "smooth", 2048, 0, 9, "lz4hc, bitshuffle"),
        ("zstd", 2, 4, "smooth", 3000, 1024, 5, "zstd, bitshuffle, dont-split, shorter last block"),
        ("zlib", 1, 4, "smooth", 2000, 0, 5, "zlib, byte shuffle"),
        ("lz4", 1, 2, "smooth", 100, 0, 5, "under 128 bytes: memcpyed"),
        ("zstd", 0, 1, "random", 600, 0, 5, "incompressible: memcpyed"),
    ]
    for cname, shuffle, typesize, kind, nbytes, blocksize, clevel, note in cases:
        raw = data(rng, kind, nbytes, typesize)
        codec = Blosc(cname=cname, clevel=clevel, shuffle=shuffle, blocksize=blocksize)
        frame = bytes(codec.encode(np.frombuffer(raw, dtype=dtype_for(typesize))))
        name = "numcodecs-%s-s%d-t%d-%s-n%d-l%d" % (cname, shuffle, typesize, kind, nbytes, clevel)
        emit(name, "numcodecs %s (c-blosc %s)" % (numcodecs.__version__, blosc.VERSION_STRING), note, raw, frame)

    # snappy: numcodecs' c-blosc lacks it, tensorstore's has it.
    nosync = ts.Context({"file_io_sync": False})
    for shuffle, note in [(1, "snappy, byte shuffle, split"), (2, "snappy, bitshuffle")]:
        raw = data(rng, "smooth", 2000, 4)
        path = os.path.join(outdir, "ts-work")
        arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path},
                       "metadata": {"shape": [500], "chunks": [500], "dtype": "<u4",
                                    "compressor": {"id": "blosc", "cname": "snappy", "clevel": 5,
                                                   "shuffle": shuffle, "blocksize": 0}}},
                      create=True, delete_existing=True, context=nosync).result()
        arr.write(np.frombuffer(raw, dtype="<u4")).result()
        with open(os.path.join(path, "0"), "rb") as f:
            frame = f.read()
        emit("tensorstore-snappy-s%d-t4-smooth-n2000" % shuffle, "tensorstore", note, raw, frame)
    shutil.rmtree(os.path.join(outdir, "ts-work"))

    with open(os.path.join(outdir, "fixtures.json"), "w") as f:
        json.dump(fixtures, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
