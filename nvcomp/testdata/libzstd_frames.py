"""Writes zstd frames made by libzstd (through numcodecs) for nvcomp's
tests: every level from fast to ultra, on data of several kinds and sizes,
so that the header scan sees the block and literals layouts the reference
encoder uses (treeless literals, repeated tables, four-stream literals).

Usage: libzstd_frames.py OUTDIR SEED

For each frame it writes OUTDIR/<n>.zst (a one-shot frame: content size,
no checksum) and lists {"name", "size", "level", "kind"} in
OUTDIR/manifest.json.
"""

import json
import os
import sys

import numcodecs
import numpy as np


def sources(rng, n):
    """Data of several kinds, n bytes each."""
    t = np.arange(n // 2 + 1, dtype=np.float64)
    smooth = (np.sin(t / 300.0) * 20000 + 30000 + rng.integers(0, 16, t.size)).astype("<u2").tobytes()[:n]
    words = b"".join(rng.choice([b"zarr ", b"shard ", b"chunk ", b"gpu ", b"batch\n"], n // 4))[:n]
    u16 = np.frombuffer(smooth + b"\0" * (len(smooth) % 2), dtype="<u2")
    shuffled = np.concatenate([u16.view(np.uint8)[0::2], u16.view(np.uint8)[1::2]]).tobytes()[:n]
    sparse = np.where(rng.random(n) < 0.5, rng.integers(0, 256, n), 0).astype(np.uint8).tobytes()
    return {
        "random": rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
        "smooth": smooth,
        "text": words,
        "shuffled": shuffled,
        "sparse": sparse,
    }


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    manifest = []
    for size in [37, 1000, 4096 + 3, 65536, 200003, 1 << 20]:
        for kind, data in sources(rng, size).items():
            for level in [-5, 1, 3, 6, 9, 15, 19, 22]:
                frame = numcodecs.Zstd(level=level, checksum=False).encode(data)
                name = "%d.zst" % len(manifest)
                with open(os.path.join(out, name), "wb") as f:
                    f.write(frame)
                manifest.append({"name": name, "size": len(data), "level": level, "kind": kind})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
