"""The default Config (buffers and max_chunk_uncompressed_bytes 0) reads
arrays whose chunks decode to 32 MiB (the public zarr benchmark's 256^3
uint16 chunks), sizing them as they are met: written by the binary's own
``damacy gen`` from the zarrbench scenarios, shrunk to one chunk. Skips without a binary that serves (fails instead when
DAMACY_REQUIRE_SERVE=1).
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

import damacy


def benchmark_values(box):
    """The public zarr benchmark's values over box ((start, stop) per axis):
    (x + y^2/32 + z^3) % 65536 as its generator computes them."""
    (z0, z1), (y0, y1), (x0, x1) = box
    z = np.arange(z0, z1, dtype=np.int64)[:, None, None]
    y = np.arange(y0, y1, dtype=np.int64)[None, :, None]
    x = np.arange(x0, x1, dtype=np.int64)[None, None, :]
    return ((x + (y * y) // 32 + z**3) % 65536).astype(np.uint16)


@pytest.mark.parametrize("scenario", ["zarrbench-uncompressed", "zarrbench-compressed"])
def test_default_config_reads_32_mib_chunks(serve_binary, tmp_path, scenario):
    out = tmp_path / "data"
    subprocess.run([serve_binary, "gen", "--shape", "256,256,256", scenario, str(out)], check=True, capture_output=True)
    image = os.path.join(out, "a000")
    boxes = [[(0, 32), (100, 132), (200, 232)], [(224, 256), (0, 32), (17, 49)]]
    with damacy.Pipeline(damacy.Config(batch_size=2, host_buffer_bytes=0, device_buffer_bytes=0, device="cpu")) as p:
        p.push([damacy.Sample(image, b) for b in boxes])
        p.flush()
        with p.pop() as b:
            got = b.numpy()
    for i, box in enumerate(boxes):
        np.testing.assert_array_equal(got[i], benchmark_values(box).astype(np.float32))
