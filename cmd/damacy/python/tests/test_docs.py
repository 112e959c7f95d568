"""The documentation runs: every Python block of the repository's README.md
and of this package's README.md, every shell line of this package's
README.md, and every example in examples/, against the installed package.

The blocks run as written, each in a fresh interpreter whose working
directory holds the stores they name (``image.zarr``, ``cells/cell-1.zarr``,
``cells/cell-2.zarr``, written by the binary's ``damacy gen``). Without a
GPU, or with ``device="cpu"``, they run on the host engine; blocks that use
torch need it installed (they skip without it, and fail instead when
DAMACY_REQUIRE_TORCH=1, as CI sets). The Go and shell blocks of the
repository's README.md run in cmd/damacy/readme_test.go.
"""

from __future__ import annotations

import faulthandler
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import damacy

import support

PYDIR = Path(__file__).resolve().parent.parent  # cmd/damacy/python
ROOT = PYDIR.parent.parent.parent
READMES = {"README.md": ROOT / "README.md", "cmd/damacy/python/README.md": PYDIR / "README.md"}

# The languages whose blocks each README has, and where they run.
RUN_HERE = {"README.md": {"python"}, "cmd/damacy/python/README.md": {"python", "sh"}}
RUN_IN_GO = {"README.md": {"go", "sh"}, "cmd/damacy/python/README.md": set()}

# What a block prints, for the blocks that print: by a line of the block.
OUTPUT = {
    "print(x.shape)": "(4, 32, 64, 64)\n(4, 32, 64, 64)\n(1, 32, 64, 64)\n",
}


def code_blocks(path: Path) -> List[Tuple[str, int, str]]:
    """The fenced code blocks of a Markdown file: (language, line of the
    opening fence, text)."""
    blocks = []
    lang, start, text = None, 0, []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if lang is None and line.startswith("```"):
            lang, start, text = line[3:].strip(), n, []
        elif lang is not None and line.strip() == "```":
            blocks.append((lang, start, "\n".join(text) + "\n"))
            lang = None
        elif lang is not None:
            text.append(line)
    assert lang is None, f"{path}:{start}: code block not closed"
    return blocks


def blocks_of(lang: str) -> List:
    return [
        pytest.param(readme, line, text, id=f"{readme}:{line}")
        for readme, path in READMES.items()
        for block_lang, line, text in code_blocks(path)
        if block_lang == lang
    ]


def test_every_block_runs_somewhere():
    for readme, path in READMES.items():
        blocks = code_blocks(path)
        assert blocks, f"{readme} has no code blocks"
        for lang, line, _ in blocks:
            assert lang in RUN_HERE[readme] | RUN_IN_GO[readme], f"{readme}:{line}: a {lang!r} block that no test runs"


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        support.skip_or_fail(f"torch is not installed ({e})", "DAMACY_REQUIRE_TORCH")


@pytest.fixture(scope="module")
def binary() -> str:
    path, why = support.serve_binary()
    if path is None:
        support.skip_or_fail(why, "DAMACY_REQUIRE_SERVE")
    return path


@pytest.fixture(scope="module")
def stores(binary, tmp_path_factory) -> Path:
    """A directory holding the stores the blocks name: three 64 x 256 x 256
    uint16 OME-NGFF images, the first with a label image "cells" (a fourth)."""
    root = tmp_path_factory.mktemp("docs")
    subprocess.run(
        [binary, "gen", "--arrays", "4", "--shape", "64,256,256", "smoke", str(root / "gen")],
        check=True,
        capture_output=True,
    )
    (root / "cells").mkdir()
    os.rename(root / "gen" / "a000", root / "image.zarr")
    os.rename(root / "gen" / "a001", root / "cells" / "cell-1.zarr")
    os.rename(root / "gen" / "a002", root / "cells" / "cell-2.zarr")
    labels = root / "image.zarr" / "labels"
    labels.mkdir()
    (labels / "zarr.json").write_text(
        '{"zarr_format": 3, "node_type": "group", "attributes": {"ome": {"version": "0.5", "labels": ["cells"]}}}'
    )
    os.rename(root / "gen" / "a003", labels / "cells")
    return root


def child_env() -> Dict[str, str]:
    """The environment of a child interpreter: this one's, with the
    installed package on its path."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


@pytest.mark.parametrize("readme, line, text", blocks_of("python"))
def test_python_block(readme, line, text, binary, stores):
    if re.search(r"^\s*import .*\btorch\b", text, re.M):
        require_torch()
    r = subprocess.run(
        [sys.executable, "-c", text], cwd=stores, env=child_env(), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, f"{readme}:{line} failed:\n{r.stderr}"
    for marker, want in OUTPUT.items():
        if marker in text:
            assert r.stdout == want, f"{readme}:{line} printed {r.stdout!r}, want {want!r}"


def test_output_markers_name_blocks():
    texts = [text for readme, path in READMES.items() for _, _, text in code_blocks(path)]
    for marker in OUTPUT:
        assert any(marker in t for t in texts), f"no block holds {marker!r}: update OUTPUT"


def shell_lines() -> List:
    lines = []
    for readme, path in READMES.items():
        if "sh" not in RUN_HERE[readme]:
            continue
        for lang, line, text in code_blocks(path):
            if lang != "sh":
                continue
            for cmd in text.splitlines():
                cmd = cmd.split("#", 1)[0].strip()
                if cmd:
                    lines.append(pytest.param(cmd, id=f"{readme}:{line}:{cmd}"))
    return lines


def wheel_name(arch: str) -> str:
    return f"damacy-{damacy.__version__}-py3-none-manylinux_2_17_{arch}.whl"


@pytest.mark.parametrize("cmd", shell_lines())
def test_shell_line(cmd, tmp_path):
    argv = shlex.split(cmd)
    if argv[:2] == ["pip", "install"]:
        run_pip_install(argv, tmp_path)
    elif argv[0] == "DAMACY_REQUIRE_GPU=1" and argv[1:4] == ["python", "-m", "pytest"]:
        run_gpu_tests(argv)
    else:
        pytest.fail(f"the shell line {cmd!r}: no test runs it (add it to test_shell_line)")


def run_pip_install(argv: List[str], tmp_path: Path) -> None:
    """pip install WHEEL: the name is this version's x86_64 wheel; the
    wheel that make test-python built for this machine installs (into a
    directory: numpy, its requirement, is here already) and its package
    runs its binary."""
    assert argv[2:] == [wheel_name("x86_64")], f"{argv}: want the name of version {damacy.__version__}'s wheel"
    arch = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine()]
    whl = ROOT / "dist" / wheel_name(arch)
    if not whl.is_file():
        pytest.skip(f"no {whl.name} in dist/ (make test-python builds it)")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(whl)],
        check=True,
    )
    code = (
        "import os, subprocess, damacy\n"
        "print(damacy.__file__)\n"
        "subprocess.run([os.path.join(os.path.dirname(damacy.__file__), 'bin', 'damacy'), 'help'], check=True)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(target)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(target)), r.stdout


def run_gpu_tests(argv: List[str]) -> None:
    """The GPU tests' command: on a GPU host the run this test belongs to
    runs the same tests; here the command must name the file and collect
    its tests (they need a GPU to run)."""
    path = ROOT / argv[-1]
    assert path.is_file(), f"{argv[-1]}: no such file below the repository's root"
    env = dict(child_env(), DAMACY_REQUIRE_GPU="1")
    r = subprocess.run(
        [sys.executable, *argv[2:-1], "-p", "no:cacheprovider", "--collect-only", "-q", argv[-1]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and re.search(r"\d+ tests? collected", r.stdout), r.stdout + r.stderr


# Each example and how it runs here: (name, arguments) per run.
EXAMPLES: Dict[str, List[Tuple[str, List[str]]]] = {
    # torchrun on the host engine with gloo. 520 crops on 4 ranks are 130
    # per rank: 16 batches of 8 and a last one of 2. 44 crops on 2 ranks
    # over 2 epochs: 22 per rank, 8, 8 and 6, twice.
    "train_ddp.py": [
        ("4 ranks, 520 crops", ["--nproc-per-node=4", "--cpu", "--samples", "520", "--epochs", "1"]),
        ("2 ranks, 44 crops, 2 epochs", ["--nproc-per-node=2", "--cpu", "--samples", "44", "--epochs", "2"]),
    ],
}


# The examples that a test file of their own runs.
EXAMPLE_TESTS = {"train_unet3d.py": "test_train_unet3d.py"}


def test_every_example_runs():
    found = {p.name for p in (PYDIR / "examples").glob("*.py")}
    runs = set(EXAMPLES) | set(EXAMPLE_TESTS)
    assert found == runs, f"examples {sorted(found)}, runs for {sorted(runs)}: update EXAMPLES"
    for test in EXAMPLE_TESTS.values():
        assert (Path(__file__).parent / test).is_file(), test


@pytest.mark.parametrize(
    "example, args", [pytest.param(e, a, id=f"{e}: {what}") for e, runs in EXAMPLES.items() for what, a in runs]
)
def test_example(example, args, binary, tmp_path):
    require_torch()
    # The 4-rank run takes minutes on a 2-core machine: past conftest's
    # 120 s limit for a hang.
    faulthandler.dump_traceback_later(1200, exit=True)
    ranks = int(args[0].split("=")[1])
    samples, epochs = int(args[args.index("--samples") + 1]), int(args[args.index("--epochs") + 1])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", args[0], str(PYDIR / "examples" / example)]
    cmd += [*args[1:], "--data", str(tmp_path / "data")]
    # TMPDIR: torchrun's log directories (torchelastic_*) stay in tmp_path.
    env = dict(child_env(), TMPDIR=str(tmp_path))
    r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1100)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    seen = re.findall(r"^epoch (\d+): (\d+) crops on (\d+) ranks", r.stdout, re.M)
    assert seen == [(str(e), str(samples), str(ranks)) for e in range(epochs)], r.stdout
