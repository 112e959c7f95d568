"""Writes sharded zarr v3 arrays with tensorstore's zstd codec and dumps
their inner chunks, for nvcomp's tests.

Usage: tensorstore_zstd.py OUTDIR SEED

tensorstore writes zstd frames without Frame_Content_Size. For each inner
chunk this writes OUTDIR/chunks/<array>-<n>.zst (the chunk's bytes as stored
in the shard) and OUTDIR/chunks/<array>-<n>.raw (what it must decode to,
read back through tensorstore), and OUTDIR/manifest.json listing them.
"""

import json
import os
import struct
import sys

import numpy as np
import tensorstore as ts


def smooth(rng, shape, dtype):
    """A smooth field plus a few bits of noise, like a microscopy volume."""
    grids = np.meshgrid(*[np.linspace(0, 3 * np.pi, n) for n in shape], indexing="ij")
    phase = rng.uniform(0, 2 * np.pi, size=len(shape))
    field = sum(np.sin(g + p) for g, p in zip(grids, phase))
    if np.dtype(dtype).kind == "f":
        return (field + rng.normal(0, 0.01, size=shape)).astype(dtype)
    field = (field - field.min()) / (np.ptp(field) or 1) * 40000
    return (field + rng.integers(0, 48, size=shape)).astype(dtype)


def write(out, name, data, shard, inner, level, checksum):
    path = os.path.join(out, "store", name)
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": path},
        "metadata": {
            "shape": list(data.shape),
            "data_type": str(data.dtype),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
            "codecs": [{
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(inner),
                    "codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "zstd", "configuration": {"level": level, "checksum": checksum}},
                    ],
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }],
        },
        "create": True,
        "delete_existing": True,
    }
    arr = ts.open(spec).result()
    arr[...].write(data).result()
    back = arr[...].read().result()
    assert np.array_equal(back, data)

    grid = [s // c for s, c in zip(shard, inner)]
    n_inner = int(np.prod(grid))
    entries = []
    for shard_idx in np.ndindex(*[d // s for d, s in zip(data.shape, shard)]):
        key = os.path.join(path, "c", *[str(i) for i in shard_idx])
        blob = open(key, "rb").read()
        index = blob[len(blob) - (16 * n_inner + 4):]
        for k, inner_idx in enumerate(np.ndindex(*grid)):
            off, nbytes = struct.unpack_from("<QQ", index, 16 * k)
            if off == 2**64 - 1:
                continue
            origin = [si * s + ii * c for si, s, ii, c in zip(shard_idx, shard, inner_idx, inner)]
            sel = tuple(slice(o, o + c) for o, c in zip(origin, inner))
            stem = f"{name}-{len(entries)}"
            with open(os.path.join(out, "chunks", stem + ".zst"), "wb") as f:
                f.write(blob[off:off + nbytes])
            with open(os.path.join(out, "chunks", stem + ".raw"), "wb") as f:
                f.write(np.ascontiguousarray(back[sel]).astype(data.dtype.newbyteorder("<")).tobytes())
            entries.append({"array": name, "zst": stem + ".zst", "raw": stem + ".raw"})
    return entries


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(out, "chunks"), exist_ok=True)
    entries = []
    # 128 KiB inner chunks of uint16, level 3, no checksum.
    entries += write(out, "u16", smooth(rng, (64, 128, 128), "uint16"), (32, 128, 128), (16, 64, 64), 3, False)
    # 64 KiB inner chunks of float32, level 5, with checksums.
    entries += write(out, "f32", smooth(rng, (32, 128, 128), "float32"), (32, 64, 64), (4, 64, 64), 5, True)
    # 256 KiB inner chunks of uniformly random uint8 (incompressible), level 1.
    entries += write(out, "u8", rng.integers(0, 256, size=(64, 256, 256), dtype=np.uint8), (64, 256, 256), (4, 256, 256), 1, False)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"tensorstore": ts.__dict__.get("__version__", "unknown"), "chunks": entries}, f)


if __name__ == "__main__":
    main()
