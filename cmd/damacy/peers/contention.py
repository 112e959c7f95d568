#!/usr/bin/env python3
"""What another context's GPU work costs a busy trainer.

    python cmd/damacy/peers/contention.py [--seconds 6] [--json out.json]
    python cmd/damacy/peers/contention.py --load-cmd "damacy bench --ceilings=false --duration 20s paced.json"

The trainer is a loop of bf16 matmuls (--n x --n, 8192 by default: about
1.4 ms each on an H200) that keeps the GPU busy; its rate is measured with
no load, then beside each load:

- ``isolated R``: one tiny kernel (one block, about 5 us), R times a second;
- ``burst K R``: K tiny kernels back to back, R times a second;
- ``long B U R``: one kernel of B blocks that spins for U us, R times a second:
  work that holds few SMs for a long time, as a decoder of a few large
  chunks does;
- ``--load-cmd CMD``: any command, run once beside the trainer (a damacy
  bench run paced as a training step would pop, say).

Each synthetic load runs twice: in another process (a CUDA context of its
own, which the GPU time-slices with the trainer's unless MPS is running) and
on a second stream of the trainer's own process and context. The run under
MPS is the control: start nvidia-cuda-mps-control -d before, and say so with
--mps (the figure is only labelled). The slowdown is 100 * (1 - rate with the
load / rate without), the load's achieved rate beside it.

Needs torch and cupy (for the spinning kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

SPIN = r"""
extern "C" __global__ void spin(long long cycles, int *sink) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    if (threadIdx.x == 0 && cycles < 0) sink[blockIdx.x] = 1;
}
"""


def spinner(stream: Any = None):
    """A function that launches the spin kernel: (blocks, microseconds)."""
    import cupy as cp

    k = cp.RawKernel(SPIN, "spin")
    sink = cp.zeros(4096, dtype=cp.int32)
    khz = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)

    def launch(blocks: int, us: float) -> None:
        cycles = cp.int64(int(us * khz / 1e3))
        if stream is not None:
            with stream:
                k((blocks,), (32,), (cycles, sink))
        else:
            k((blocks,), (32,), (cycles, sink))

    return launch


def run_load(spec: List[str], seconds: float, stop: Optional[threading.Event] = None, stream: Any = None) -> int:
    """Runs one synthetic load for seconds (or until stop); returns how many
    times it fired."""
    launch = spinner(stream)
    kind = spec[0]
    if kind == "isolated":
        rate, body = float(spec[1]), lambda: launch(1, 5)
    elif kind == "burst":
        k, rate = int(spec[1]), float(spec[2])
        body = lambda: [launch(1, 5) for _ in range(k)]  # noqa: E731
    elif kind == "long":
        b, us, rate = int(spec[1]), float(spec[2]), float(spec[3])
        body = lambda: launch(b, us)  # noqa: E731
    else:
        raise SystemExit(f"unknown load {spec}")
    period = 1.0 / rate
    end = time.perf_counter() + seconds
    nxt = time.perf_counter()
    fired = 0
    while time.perf_counter() < end and not (stop and stop.is_set()):
        body()
        fired += 1
        nxt += period
        d = nxt - time.perf_counter()
        if d > 0:
            time.sleep(d)
    return fired


def trainer_rate(torch: Any, n: int, seconds: float) -> float:
    """Matmuls per second over seconds, the GPU kept busy."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ b
        done += 20
        torch.cuda.synchronize()
    return done / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="each measurement")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--mps", action="store_true", help="label: MPS is running")
    ap.add_argument("--load-cmd", action="append", default=[], help="a command run beside the trainer")
    ap.add_argument("--loads", default="isolated 100;isolated 1000;burst 20 100;long 4 1000 50;long 4 2000 20;long 132 500 50")
    ap.add_argument("--placements", default="other,same")
    ap.add_argument("--json")
    ap.add_argument("--load", help=argparse.SUPPRESS)  # run one load in this process
    args = ap.parse_args()
    if args.load:
        import cupy as cp

        spinner()(1, 1)  # compile and load before READY
        cp.cuda.runtime.deviceSynchronize()
        print("READY", flush=True)
        n = run_load(args.load.split(), args.seconds + 3)
        print(f"FIRED {n}", flush=True)
        return

    import cupy as cp
    import torch

    rows: List[Dict[str, Any]] = []
    base = trainer_rate(torch, args.n, args.seconds)
    label = "MPS" if args.mps else "no MPS"
    print(f"trainer alone ({label}): {base:.1f} matmuls/s", flush=True)
    rows.append({"load": "none", "placement": "-", "mps": args.mps, "rate": base, "slowdown_pct": 0.0})

    def measure(load: str, placement: str, start, finish) -> None:
        start()
        time.sleep(0.5)
        r = trainer_rate(torch, args.n, args.seconds)
        fired = finish()
        row = {"load": load, "placement": placement, "mps": args.mps, "rate": r,
               "slowdown_pct": 100.0 * (1 - r / base), "fired": fired}
        rows.append(row)
        print(f"{load:>22} {placement:>6} ({label}): {r:8.1f} matmuls/s  slowdown {row['slowdown_pct']:5.1f}%  load fired {fired}", flush=True)

    for spec in [s.strip() for s in args.loads.split(";") if s.strip()]:
        for placement in args.placements.split(","):
            if placement == "other":
                box: Dict[str, Any] = {}

                def start(spec=spec, box=box) -> None:
                    p = subprocess.Popen([sys.executable, __file__, "--load", spec, "--seconds", str(args.seconds)],
                                         stdout=subprocess.PIPE, text=True)
                    assert p.stdout is not None and p.stdout.readline().strip() == "READY"
                    box["p"] = p

                def finish(box=box) -> int:
                    out, _ = box["p"].communicate()
                    return int(next((ln.split()[1] for ln in out.splitlines() if ln.startswith("FIRED")), -1))

                measure(spec, placement, start, finish)
            else:
                stop = threading.Event()
                stream = cp.cuda.Stream(non_blocking=True)
                result: Dict[str, int] = {}
                th = threading.Thread(target=lambda: result.setdefault("n", run_load(spec.split(), 3600, stop, stream)))

                def finish_same(th=th, stop=stop, result=result) -> int:
                    stop.set()
                    th.join()
                    return result.get("n", -1)

                measure(spec, placement, th.start, finish_same)
    for cmd in args.load_cmd:
        box2: Dict[str, Any] = {}

        def start_cmd(cmd=cmd, box2=box2) -> None:
            box2["p"] = subprocess.Popen(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(float(os.environ.get("CONTENTION_CMD_SETTLE", "8")))  # past its start-up and warm-up

        def finish_cmd(box2=box2) -> int:
            box2["p"].wait()
            return box2["p"].returncode

        measure(cmd, "other", start_cmd, finish_cmd)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
