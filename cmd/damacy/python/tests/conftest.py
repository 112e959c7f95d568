"""Fixtures for the damacy client's tests.

The tests import the *installed* damacy (``make test-python`` installs the
wheel and runs them from outside the source tree). Fixtures:

- ``fake``: an in-process fake server (fake_server.FakeServer) that every
  Pipeline made during the test talks to instead of a damacy binary;
- ``fake_binary``: DAMACY_BINARY pointing at a script that runs the fake
  server as a process, for the tests of process handling.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import stat
import sys
from typing import Iterator, List

import pytest

import damacy
import damacy._server

import support
from fake_server import FakeServer

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_report_header(config: pytest.Config) -> str:
    return f"damacy {damacy.__version__} from {os.path.dirname(damacy.__file__)}"


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A test that hangs dumps every thread's stack and ends the run,
    rather than blocking CI."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class FakeServers:
    """The fake servers started during one test, in order."""

    def __init__(self) -> None:
        self.servers: List[FakeServer] = []
        self.slots = 2

    @property
    def last(self) -> FakeServer:
        return self.servers[-1]

    def launch(self):  # the signature of damacy._server.launch
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.servers.append(FakeServer(theirs, slots=self.slots))
        return ours, None


@pytest.fixture
def serve_binary(monkeypatch: pytest.MonkeyPatch) -> str:
    """The damacy binary that serves (DAMACY_BINARY for the test's
    pipelines); skips without one, fails instead when
    DAMACY_REQUIRE_SERVE=1."""
    path, why = support.serve_binary()
    if path is None:
        support.skip_or_fail(why, "DAMACY_REQUIRE_SERVE")
    monkeypatch.setenv("DAMACY_BINARY", path)
    return path


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServers]:
    servers = FakeServers()
    monkeypatch.setattr(damacy._server, "launch", servers.launch)
    yield servers
    for s in servers.servers:
        s.die()
        s.join()


@pytest.fixture
def fake_binary(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A 'damacy' executable that runs fake_server.py with this Python."""
    path = tmp_path / "damacy"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {os.path.join(HERE, "fake_server.py")} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("DAMACY_BINARY", str(path))
    return str(path)
