"""The client's CUDA code without a GPU, against a stand-in libcuda.so.1
(stub_cuda.c, compiled here when a C compiler is available), each scenario
in its own process: the CUDA engine (stub_scenarios.py) against the fake
server's, and the copy engine (copy_scenarios.py) against the real
binary's host engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import support  # noqa: E402

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
    run_scenario(stub_dir, tmp_path, "stub_scenarios.py", scenario)


def run_scenario(stub_dir: str, tmp_path, script: str, *args: str, **env_extra: str) -> None:
    """Run one scenario of script in a process of its own against the stub
    driver; its failure shows its output and the driver calls it made."""
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=os.pathsep.join(filter(None, [stub_dir, env.get("LD_LIBRARY_PATH")])),
        STUB_CUDA_LOG=str(tmp_path / "calls.log"),
        PYTHONPATH=os.pathsep.join(sys.path),
        **env_extra,
    )
    env.pop("LOCAL_RANK", None)
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, script), *args], env=env, capture_output=True, text=True, timeout=120
    )
    calls = (tmp_path / "calls.log").read_text() if (tmp_path / "calls.log").exists() else ""
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n--- driver calls:\n{calls[-6000:]}"


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> str:
    """A dataset of test_train_step.py's TINY kind, written by the real
    binary (two OME-NGFF images with a label image "cells")."""
    from test_train_step import TINY

    path, why = support.serve_binary()
    if path is None:
        support.skip_or_fail(why, "DAMACY_REQUIRE_SERVE")
    root = tmp_path_factory.mktemp("copy-data")
    (root / "tiny.json").write_text(json.dumps(TINY))
    subprocess.run([path, "gen", str(root / "tiny.json"), str(root / "data")], check=True, capture_output=True)
    return str(root / "data")


COPY_SCENARIOS = [
    "copies_match_the_host_engine",
    "copies_without_page_locking",
    "kept_batches_and_close",
    "loader_defaults_to_copies",
    "pops_outpace_copies",
    "server_killed",
]


@pytest.mark.parametrize("scenario", COPY_SCENARIOS)
def test_copy_engine_against_a_stub_driver(stub_dir, tiny_data, tmp_path, scenario):
    path, _ = support.serve_binary()
    run_scenario(stub_dir, tmp_path, "copy_scenarios.py", scenario, tiny_data, DAMACY_BINARY=str(path))
