"""The training-step benchmark (cmd/damacy/peers/train_step.py) on the CPU:
every mode (the ceiling, damacy's Loader on the host engine, MONAI's
Dataset + DataLoader with a worker, with and without MetaTensors) trains MONAI's UNet on a tiny dataset of
the training scenario's kind, its loss finite and falling. No timing is
asserted here: the figures come from the GPU host (cmd/damacy/BENCH.md).

Under torchrun (2 ranks, gloo) every rank trains; a rank killed with SIGKILL
takes the job down and leaves no damacy server behind.

It needs torch, MONAI and zarr-python (skipped without them, failing
instead when DAMACY_REQUIRE_TORCH=1).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

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
    "run": {"config": {"batch_size": 2, "sample_shape": [1, 16, 16, 16], "dtype": "f32"}, "batches": 4},
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
           "--device", "cpu", "--models", "small,probe", "--steps", "16", "--warmup", "2", "--batch-size", "2",
           "--box", "16", "--workers", "1", "--loader-threads", "1", "--lr", "1e-2", "--cudnn-benchmark", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    rows = json.loads(out.read_text())
    modes = ["ceiling", "damacy", "monai", "monai-fast"]
    assert [(row["model"], row["mode"]) for row in rows] == [(m, x) for m in ("small", "probe") for x in modes], rows
    assert rows[1]["loader_threads"] == 1, rows[1]  # --loader-threads reached the Pipeline's Config
    assert all(row["cudnn_benchmark"] for row in rows), rows  # and --cudnn-benchmark every mode's process
    for row in rows:
        assert row["finite"], row
        assert math.isfinite(row["steps_per_s"]) and row["steps_per_s"] > 0, row
        assert row["loss_last"] < row["loss_first"], f"{row['mode']}: the loss did not fall: {row}"
    # The table a reader gets names every mode.
    for mode in modes:
        assert f"| small | {mode} |" in r.stdout and f"| probe | {mode} |" in r.stdout, r.stdout


def run_peer(tmp_path, *extra: str, timeout: int = 600):
    scenario = tmp_path / "tiny.json"
    scenario.write_text(json.dumps(TINY))
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(PEER), "--data", str(tmp_path / "data"), "--scenario", str(scenario),
           "--device", "cpu", "--models", "small", "--warmup", "2", "--batch-size", "2",
           "--box", "16", "--workers", "1", "--lr", "1e-2", "--json", str(out), *extra]
    # TMPDIR: torchrun's log directories (torchelastic_*) stay in tmp_path.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(tmp_path))
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    return json.loads(out.read_text()), r.stdout


def test_two_ranks_train(serve_binary, torch_monai_zarr, tmp_path):
    """Under torchrun (2 ranks, gloo): every rank of every mode trains its
    DDP model, its loss falling, each against its own ceiling."""
    rows, table = run_peer(tmp_path, "--ranks", "2", "--steps", "12", "--modes", "ceiling,damacy,monai-fast")
    assert [(r["mode"], r["rank"], r["world"]) for r in rows] == [
        (m, k, 2) for m in ("ceiling", "damacy", "monai-fast") for k in (0, 1)], rows
    for row in rows:
        assert row["finite"] and row["loss_last"] < row["loss_first"], row
        assert math.isfinite(row["of_ceiling_pct"]), row
    assert "| small | damacy rank 1 |" in table, table


def children(pid: int) -> List[int]:
    """The pids whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def is_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        return len(args) > 1 and args[1] == b"serve"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_rank_killed_leaves_no_server(serve_binary, torch_monai_zarr, tmp_path):
    """A rank killed with SIGKILL mid-run: torchrun tears the job down, the
    other rank's loader stops with it, and no damacy server is left."""
    scenario = tmp_path / "tiny.json"
    scenario.write_text(json.dumps(TINY))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(tmp_path))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(PEER),
           "--data", str(tmp_path / "data"), "--scenario", str(scenario), "--device=cpu", "--steps=100000",
           "--warmup=2", "--batch-size=2", "--box=16", "--one", "damacy,small"]
    subprocess.run([sys.executable, str(PEER), "--data", str(tmp_path / "data"), "--scenario", str(scenario),
                    "--device=cpu", "--modes=damacy", "--steps=1", "--warmup=0", "--batch-size=2", "--box=16"],
                   env=env, cwd=tmp_path, capture_output=True, timeout=300)  # the dataset, written once
    job = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ranks: List[int] = []
        servers: List[int] = []

        def both_loading() -> bool:
            nonlocal ranks, servers
            ranks = children(job.pid)
            servers = [s for r in ranks for s in children(r) if is_server(s)]
            return len(ranks) == 2 and len(servers) == 2

        support.wait_until(both_loading, timeout=240, what="two ranks, each with its damacy server")
        time.sleep(2)  # training
        os.kill(max(ranks), signal.SIGKILL)
        rc = job.wait(timeout=120)
        assert rc != 0, "torchrun reported success after a rank was killed"
        support.wait_until(lambda: all(support.gone(s) for s in servers), timeout=30,
                           what=f"the damacy servers {servers} to exit")
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
