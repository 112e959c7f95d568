"""The client's CUDA engine without a GPU: stub_scenarios.py against a
stand-in libcuda.so.1 (stub_cuda.c, compiled here when a C compiler is
available) and the fake server's CUDA engine, each scenario in its own
process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory) -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for the libcuda stand-in")
    out = tmp_path_factory.mktemp("stub-cuda")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(out / "libcuda.so.1"), os.path.join(HERE, "stub_cuda.c")],
        check=True,
    )
    return str(out)


@pytest.mark.parametrize(
    "scenario",
    [
        "binding",
        "current_context_is_used",
        "export_and_release",
        "done_event_fallback",
        "forked_child",
        "default_stream_and_ragged",
        "local_rank_warning",
    ],
)
def test_cuda_engine_against_a_stub_driver(stub_dir, tmp_path, scenario):
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=os.pathsep.join(filter(None, [stub_dir, env.get("LD_LIBRARY_PATH")])),
        STUB_CUDA_LOG=str(tmp_path / "calls.log"),
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    env.pop("LOCAL_RANK", None)
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "stub_scenarios.py"), scenario],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = (tmp_path / "calls.log").read_text() if (tmp_path / "calls.log").exists() else ""
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n--- driver calls:\n{calls}"
