#!/usr/bin/env python3
"""Write a platform wheel of the damacy package that carries a damacy binary.

    python3 build_wheel.py --binary PATH --arch {amd64,arm64} [--out DIR]

The wheel (py3-none-manylinux_2_17_<machine>, Root-Is-Purelib: false) holds
the package from damacy/ next to this script, the binary at
damacy/bin/damacy (mode 0755), and dist-info METADATA (the version from
damacy/_version.py, README.md as the description), WHEEL and RECORD. A
CGO_ENABLED=0 Go binary needs only glibc, so one manylinux tag per
architecture is enough. The binary must be of the same release: it embeds
damacy/_version.py, and a binary without that file's __version__ line is
refused. Entries are sorted and dated SOURCE_DATE_EPOCH (or
1980-01-01), so the same inputs give the same bytes. Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import time
import zipfile
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))

# GOARCH -> (wheel platform machine, ELF e_machine).
ARCHES = {"amd64": ("x86_64", 62), "arm64": ("aarch64", 183)}
GLIBC = "2_17"


def version() -> str:
    """The version written in damacy/_version.py (the one place it lives)."""
    with open(os.path.join(HERE, "damacy", "_version.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        sys.exit("build_wheel: no __version__ in damacy/_version.py")
    return m.group(1)


def check_binary(path: str, arch: str) -> None:
    """Refuse anything but a little-endian 64-bit ELF for arch."""
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        sys.exit(f"build_wheel: {path} is not a 64-bit little-endian ELF file")
    machine = int.from_bytes(head[18:20], "little")
    if machine != ARCHES[arch][1]:
        sys.exit(f"build_wheel: {path} is built for ELF machine {machine}, not {arch} ({ARCHES[arch][1]})")


def check_release(path: str, ver: str) -> None:
    """Refuse a binary of another release: the damacy binary embeds
    damacy/_version.py (cmd/damacy/version.go), so its bytes hold the same
    __version__ line as the package it is packed with."""
    with open(path, "rb") as f:
        data = f.read()
    if f'__version__ = "{ver}"'.encode() not in data:
        sys.exit(f"build_wheel: {path} does not carry release {ver} of damacy/_version.py; build it from this tree")


def package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of the package's files."""
    root = os.path.join(HERE, "damacy")
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "bin"))
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, HERE).replace(os.sep, "/"), disk))
    return out


def metadata(ver: str) -> bytes:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    head = [
        "Metadata-Version: 2.1",
        "Name: damacy",
        f"Version: {ver}",
        "Summary: Streams crops out of sharded zarr / OME-NGFF stores onto NVIDIA GPUs (or host memory) as DLPack batches",
        "Requires-Python: >=3.9",
        "Requires-Dist: numpy>=1.22",  # DLPack capsules use its C deleters (_dlpack.py)
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Operating System :: POSIX :: Linux",
        "Description-Content-Type: text/markdown",
    ]
    return ("\n".join(head) + "\n\n" + readme).encode()


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build(binary: str, arch: str, out_dir: str) -> str:
    """Write the wheel into out_dir and return its path."""
    check_binary(binary, arch)
    ver = version()
    check_release(binary, ver)
    tag = f"py3-none-manylinux_{GLIBC}_{ARCHES[arch][0]}"
    dist_info = f"damacy-{ver}.dist-info"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: damacy build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"

    entries: List[Tuple[str, bytes, int]] = []  # (path, data, mode)
    for path, disk in package_files():
        with open(disk, "rb") as f:
            entries.append((path, f.read(), 0o644))
    with open(binary, "rb") as f:
        entries.append(("damacy/bin/damacy", f.read(), 0o755))
    entries.append((f"{dist_info}/METADATA", metadata(ver), 0o644))
    entries.append((f"{dist_info}/WHEEL", wheel_meta.encode(), 0o644))
    record = "".join(record_line(p, d) + "\n" for p, d, _ in entries) + f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode(), 0o644))

    stamp = time.gmtime(max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800))[:6]
    os.makedirs(out_dir, exist_ok=True)
    wheel = os.path.join(out_dir, f"damacy-{ver}-{tag}.whl")
    tmp = wheel + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data, mode in entries:
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16  # a regular file with mode
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so that installers honour the mode
            z.writestr(info, data)
    os.replace(tmp, wheel)
    return wheel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True, help="the damacy binary to carry")
    ap.add_argument("--arch", required=True, choices=sorted(ARCHES), help="the binary's GOARCH")
    ap.add_argument("--out", default="dist", help="directory for the wheel (default: dist)")
    args = ap.parse_args()
    print(build(args.binary, args.arch, args.out))


if __name__ == "__main__":
    main()
