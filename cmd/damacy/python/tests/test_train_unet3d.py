"""examples/train_unet3d.py runs on the CPU (the host engine): alone for a
few dozen steps, its loss finite and falling on the example's easy problem,
and under torchrun on 2 ranks (gloo) end to end.

It needs torch and zarr-python (skipped without them, failing instead when
DAMACY_REQUIRE_TORCH=1). Every seed of the example is fixed, so a run is
the same every time.
"""

from __future__ import annotations

import faulthandler
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import support  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_unet3d.py"


@pytest.fixture
def torch_and_zarr() -> None:
    for module in ("torch", "zarr"):
        try:
            __import__(module)
        except ImportError as e:
            support.skip_or_fail(f"{module} is not installed ({e})", "DAMACY_REQUIRE_TORCH")


def run(cmd: List[str], cwd: Path, timeout: int) -> List[float]:
    """Run the example; the losses it printed, per step in order."""
    # TMPDIR: torchrun's log directories (torchelastic_*) stay in cwd.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(cwd))
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    steps = re.findall(r"^step (\d+): loss (\S+)$", r.stdout, re.M)
    assert [int(s) for s, _ in steps] == list(range(len(steps))), r.stdout
    return [float(loss) for _, loss in steps]


def test_one_process_learns(serve_binary, torch_and_zarr, tmp_path):
    faulthandler.dump_traceback_later(600, exit=True)
    cmd = [sys.executable, str(EXAMPLE), "--data", str(tmp_path / "data"), "--device", "cpu"]
    losses = run(cmd + ["--steps", "30", "--batch-size", "2"], tmp_path, 540)
    assert len(losses) == 30
    assert all(math.isfinite(x) for x in losses), losses
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first, f"the loss did not fall: {losses}"
    # The dataset stays: a second run reads it again.
    assert len(run(cmd + ["--steps", "2"], tmp_path, 300)) == 2


def test_torchrun_two_ranks(serve_binary, torch_and_zarr, tmp_path):
    faulthandler.dump_traceback_later(600, exit=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(EXAMPLE)]
    losses = run(cmd + ["--data", str(tmp_path / "data"), "--device", "cpu", "--steps", "3"], tmp_path, 540)
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), losses
