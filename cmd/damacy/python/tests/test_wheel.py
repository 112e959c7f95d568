"""build_wheel.py's wheels, the layout of the installed package, and the release
the binary and its server report."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import stat
import subprocess
import zipfile
from typing import Optional

import pytest

import damacy

import support

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def load_builder():
    spec = importlib.util.spec_from_file_location("build_wheel", os.path.join(SOURCE, "build_wheel.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_elf(path, machine: int, release: Optional[str] = None) -> str:
    """An ELF header for machine and, as the damacy binary does, the
    __version__ line of _version.py (release, by default the package's)."""
    head = b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little")
    release = load_builder().version() if release is None else release
    path.write_bytes(head + f'rest of a binary\n__version__ = "{release}"\n'.encode())
    return str(path)


@pytest.mark.parametrize("arch, machine, platform", [("amd64", 62, "x86_64"), ("arm64", 183, "aarch64")])
def test_wheel_contents(tmp_path, arch, machine, platform):
    builder = load_builder()
    binary = fake_elf(tmp_path / "damacy", machine)
    wheel = builder.build(binary, arch, str(tmp_path / "dist"))
    version = builder.version()
    assert os.path.basename(wheel) == f"damacy-{version}-py3-none-manylinux_2_17_{platform}.whl"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = f"damacy-{version}.dist-info"
        for required in [
            "damacy/__init__.py",
            "damacy/_version.py",
            "damacy/py.typed",
            "damacy/bin/damacy",
            f"{info}/METADATA",
            f"{info}/WHEEL",
            f"{info}/RECORD",
        ]:
            assert required in names
        assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
        binary_info = z.getinfo("damacy/bin/damacy")
        assert (binary_info.external_attr >> 16) & 0o777 == 0o755
        assert stat.S_ISREG(binary_info.external_attr >> 16)
        assert (z.getinfo("damacy/__init__.py").external_attr >> 16) & 0o777 == 0o644
        wheel_meta = z.read(f"{info}/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel_meta
        assert f"Tag: py3-none-manylinux_2_17_{platform}" in wheel_meta
        meta = z.read(f"{info}/METADATA").decode()
        head = meta.split("\n\n", 1)[0].splitlines()
        assert "Name: damacy" in head and f"Version: {version}" in head
        assert "Requires-Dist: numpy>=1.22" in head and "Requires-Python: >=3.9" in head
        assert "# damacy" in meta.split("\n\n", 1)[1]  # the README
        assert "entry_points.txt" not in " ".join(names)
        rows = [line.split(",") for line in z.read(f"{info}/RECORD").decode().splitlines()]
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), path
    with open(version_file(), encoding="utf-8") as f:
        assert f'__version__ = "{version}"' in f.read()


def version_file() -> str:
    return os.path.join(SOURCE, "damacy", "_version.py")


def test_wheel_is_reproducible(tmp_path):
    builder = load_builder()
    binary = fake_elf(tmp_path / "damacy", 62)
    a = open(builder.build(binary, "amd64", str(tmp_path / "a")), "rb").read()
    b = open(builder.build(binary, "amd64", str(tmp_path / "b")), "rb").read()
    assert a == b


def test_wheel_refuses_a_binary_of_another_arch(tmp_path):
    builder = load_builder()
    with pytest.raises(SystemExit, match="not arm64"):
        builder.build(fake_elf(tmp_path / "damacy", 62), "arm64", str(tmp_path))
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(SystemExit, match="not a 64-bit"):
        builder.build(str(tmp_path / "script"), "amd64", str(tmp_path))


def test_wheel_refuses_a_binary_of_another_release(tmp_path):
    builder = load_builder()
    with pytest.raises(SystemExit, match=f"does not carry release {builder.version()}"):
        builder.build(fake_elf(tmp_path / "damacy", 62, release="0.0.0"), "amd64", str(tmp_path))


def test_binary_and_server_report_the_package_version(serve_binary):
    """damacy version, damacy --version and the server's hello name the
    release that damacy.__version__ names."""
    out = subprocess.run([serve_binary, "version"], capture_output=True, text=True, check=True).stdout
    alias = subprocess.run([serve_binary, "--version"], capture_output=True, text=True, check=True).stdout
    assert alias == out
    first = out.splitlines()[0]
    assert first.split()[:2] == ["damacy", damacy.__version__], first
    with damacy.Pipeline(support.host_config(batch_size=1)) as p:
        assert p.server_info["server"] == first


@pytest.mark.skipif(
    os.environ.get("DAMACY_TEST_INSTALLED") != "1",
    reason="runs against an installed wheel (make test-python)",
)
def test_installed_package_carries_the_binary():
    package = os.path.dirname(damacy.__file__)
    assert not package.startswith(SOURCE + os.sep), f"damacy imported from the source tree: {package}"
    binary = os.path.join(package, "bin", "damacy")
    assert os.path.isfile(binary) and os.access(binary, os.X_OK)
    assert importlib.metadata.version("damacy") == damacy.__version__
    out = subprocess.run([binary, "version", "--json"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["version"] == damacy.__version__
