"""Read arrays written by the Go writer with zarr-python and tensorstore, and
compare them with their expected contents.

usage: read_stores.py DIR

DIR holds manifest.json, a list of {name, path, format, ngff_level, npy}:
path is the array's directory, or the OME-NGFF 0.5 image group's when
ngff_level is set; npy is the expected contents (little-endian, C order).
DIR/results.json receives, per entry, {name, zarr_python, tensorstore},
each "ok" or what went wrong. For an NGFF level, zarr-python opens the group
and finds the level through attributes.ome.multiscales[0].datasets.
"""

import json
import os
import sys
import traceback

import numpy as np
import tensorstore as ts
import zarr


def le(a):
    a = np.asarray(a)
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")))


def compare(got, want):
    got = le(got)
    if got.shape != want.shape:
        return "shape %s, want %s" % (got.shape, want.shape)
    if got.dtype.newbyteorder("=") != want.dtype.newbyteorder("="):
        return "dtype %s, want %s" % (got.dtype, want.dtype)
    if got.tobytes() != want.tobytes():
        g = np.frombuffer(got.tobytes(), dtype=np.uint8)
        w = np.frombuffer(want.tobytes(), dtype=np.uint8)
        at = int(np.argmax(g != w))
        return "bytes differ from byte %d (got %s, want %s)" % (at, g[at:at + 8].tobytes().hex(),
                                                               w[at:at + 8].tobytes().hex())
    return "ok"


def main():
    d = os.path.abspath(sys.argv[1])
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    nosync = ts.Context({"file_io_sync": False})
    results = []
    for e in manifest:
        want = np.load(os.path.join(d, e["npy"]))
        path = os.path.join(d, e["path"])
        r = {"name": e["name"]}
        try:
            if e.get("ngff_level") is not None:
                g = zarr.open_group(path, mode="r")
                ome = g.attrs["ome"]
                if ome.get("version") != "0.5":
                    raise ValueError("ome.version %r" % ome.get("version"))
                ds = ome["multiscales"][0]["datasets"][e["ngff_level"]]
                arr = g[ds["path"]]
                names = [ax["name"] for ax in ome["multiscales"][0]["axes"]]
                if list(arr.metadata.dimension_names or []) != names:
                    raise ValueError("dimension_names %r, axes %r" % (arr.metadata.dimension_names, names))
                path = os.path.join(path, ds["path"])
            else:
                arr = zarr.open_array(path, mode="r")
            r["zarr_python"] = compare(arr[...], want)
        except Exception:
            r["zarr_python"] = "error: " + traceback.format_exc(limit=2).strip().splitlines()[-1]
        try:
            driver = "zarr3" if e["format"] == 3 else "zarr"
            t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": path}}, open=True,
                        context=nosync).result()
            r["tensorstore"] = compare(t.read().result(), want)
        except Exception as ex:
            r["tensorstore"] = "error: %s" % str(ex).splitlines()[0]
        results.append(r)
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("read %d arrays (zarr-python %s, tensorstore)" % (len(results), zarr.__version__))


if __name__ == "__main__":
    main()
