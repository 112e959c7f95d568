"""Decode blosc1 chunks written by another implementation, and report.

usage: check_blosc.py DIR

DIR holds manifest.json, a list of {name, cname, clevel, shuffle, typesize,
blocksize, nbytes}, and for each entry NAME.blosc (the chunk) and NAME.raw
(the bytes it must decode to). Each chunk is decoded by numcodecs (when its
c-blosc has the codec) and by tensorstore, as the only chunk of a zarr v2
array of bytes. For comparison, the raw bytes are also encoded by numcodecs
with the same parameters. DIR/results.json receives, per entry:
{name, numcodecs, tensorstore, ref_blocksize, ref_flags}, where numcodecs and
tensorstore are "ok", "skipped: ..." or the error, and the ref_ fields come
from numcodecs' header (null when it cannot encode the cname).
"""

import json
import os
import shutil
import struct
import sys

import numpy as np
from numcodecs import Blosc, blosc
import tensorstore as ts


def dtype_for(typesize):
    return np.dtype("u%d" % typesize) if typesize in (1, 2, 4, 8) else np.dtype("V%d" % typesize)


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    have = set(blosc.list_compressors())
    nosync = ts.Context({"file_io_sync": False})
    results = []
    for e in manifest:
        name = e["name"]
        with open(os.path.join(d, name + ".blosc"), "rb") as f:
            frame = f.read()
        with open(os.path.join(d, name + ".raw"), "rb") as f:
            raw = f.read()
        r = {"name": name, "ref_blocksize": None, "ref_flags": None}

        if e["cname"] not in have:
            r["numcodecs"] = "skipped: numcodecs has no %s" % e["cname"]
        elif not raw:
            r["numcodecs"] = "skipped: numcodecs rejects empty chunks"
        else:
            try:
                got = bytes(blosc.decompress(frame))
                r["numcodecs"] = "ok" if got == raw else "decoded %d bytes that differ from the input" % len(got)
            except Exception as ex:  # report, do not stop
                r["numcodecs"] = "error: %s" % ex
            ref = Blosc(cname=e["cname"], clevel=e["clevel"], shuffle=e["shuffle"], blocksize=e["blocksize"])
            hdr = bytes(ref.encode(np.frombuffer(raw, dtype=dtype_for(e["typesize"]))))[:16]
            _, _, flags, _, _, bs, _ = struct.unpack("<BBBBIII", hdr)
            r["ref_blocksize"], r["ref_flags"] = bs, flags

        if not raw:
            r["tensorstore"] = "skipped: an empty array has no chunks"
        else:
            path = os.path.join(d, "ts-read", name)
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
            with open(os.path.join(path, ".zarray"), "w") as f:
                json.dump({"zarr_format": 2, "shape": [len(raw)], "chunks": [len(raw)], "dtype": "|u1",
                           "compressor": {"id": "blosc", "cname": e["cname"], "clevel": e["clevel"],
                                          "shuffle": e["shuffle"], "blocksize": e["blocksize"]},
                           "fill_value": 0, "filters": None, "order": "C"}, f)
            with open(os.path.join(path, "0"), "wb") as f:
                f.write(frame)
            try:
                arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path}},
                              open=True, context=nosync).result()
                got = arr.read().result().tobytes()
                r["tensorstore"] = "ok" if got == raw else "decoded %d bytes that differ from the input" % len(got)
            except Exception as ex:
                r["tensorstore"] = "error: %s" % ex
        results.append(r)
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
