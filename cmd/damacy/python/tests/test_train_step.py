"""The training-step benchmark (cmd/damacy/peers/train_step.py) on the CPU:
every mode (the ceiling, damacy's Loader on the host engine, MONAI's
Dataset + DataLoader with a worker, with and without MetaTensors) trains MONAI's UNet on a tiny dataset of
the training scenario's kind, its loss finite and falling. No timing is
asserted here: the figures come from the GPU host (cmd/damacy/BENCH.md).

It needs torch, MONAI and zarr-python (skipped without them, failing
instead when DAMACY_REQUIRE_TORCH=1).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import support  # noqa: E402

PEER = Path(__file__).resolve().parents[2] / "peers" / "train_step.py"

# The training scenario's layout (czyx uint16 images, zstd, sharded, a uint8
# label image labels/cells), small enough for a 2-core CI box.
TINY = {
    "name": "tiny-training",
    "description": "train_step.py's CPU check",
    "dataset": {
        "arrays": 2, "shape": [1, 32, 64, 64], "chunk": [1, 16, 32, 32], "shard": [1, 32, 64, 64],
        "dtype": "uint16", "codec": "zstd", "level": 3, "entropy": 0.5, "seed": 1,
        "labels": {"name": "cells", "dtype": "uint8", "chunk": [16, 32, 32], "shard": [32, 64, 64],
                   "codec": "zstd", "level": 3, "foreground": 0.05},
    },
    "run": {"batch_size": 2, "sample_shape": [1, 16, 16, 16], "batches": 4, "dtype": "f32"},
}


@pytest.fixture
def torch_monai_zarr() -> None:
    for module in ("torch", "monai", "zarr"):
        try:
            __import__(module)
        except ImportError as e:
            support.skip_or_fail(f"{module} is not installed ({e})", "DAMACY_REQUIRE_TORCH")


def test_every_mode_trains(serve_binary, torch_monai_zarr, tmp_path):
    scenario = tmp_path / "tiny.json"
    scenario.write_text(json.dumps(TINY))
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(PEER), "--data", str(tmp_path / "data"), "--scenario", str(scenario),
           "--device", "cpu", "--models", "small", "--steps", "16", "--warmup", "2", "--batch-size", "2",
           "--box", "16", "--workers", "1", "--lr", "1e-2", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    rows = json.loads(out.read_text())
    assert [row["mode"] for row in rows] == ["ceiling", "damacy", "monai", "monai-fast"], rows
    for row in rows:
        assert row["finite"], row
        assert math.isfinite(row["steps_per_s"]) and row["steps_per_s"] > 0, row
        assert row["loss_last"] < row["loss_first"], f"{row['mode']}: the loss did not fall: {row}"
    # The table a reader gets names every mode.
    for mode in ("ceiling", "damacy", "monai", "monai-fast"):
        assert f"| small | {mode} |" in r.stdout, r.stdout
