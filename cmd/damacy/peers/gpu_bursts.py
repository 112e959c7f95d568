#!/usr/bin/env python3
"""How a damacy bench run's GPU work reaches the GPU, batch by batch.

    damacy bench --trace trace.json --ceilings=false training
    python cmd/damacy/peers/gpu_bursts.py trace.json [--json]

Reads the Chrome trace of a bench run (--trace) and, over its measured
batches, reports per batch: the waves (each source's engine has its own),
the GPU spans of each stage as the engine timed them with events (h2d on the
copy stream, decode with nvCOMP's calls and the status reduction, assemble),
the compute bursts (the union of the decode and assemble spans of every
source's engine, spans closer than --merge-us joined): each is a stretch in
which the server's context wants the GPU's SMs, so without MPS each costs a
busy trainer at least one switch into that context and one back, and the
compute time they hold the GPU; and the host round trips (retire waits)
between the stages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from typing import Dict, List, Tuple


POP_ROW = 2  # the bench trace's row of each Pop


def union(spans: List[Tuple[float, float]], merge_us: float) -> List[Tuple[float, float]]:
    out: List[Tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1] + merge_us:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--merge-us", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with open(args.trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    measure = [e for e in events if e.get("cat") == "phase" and e.get("name") == "measured batches"]
    lo, hi = (measure[0]["ts"], measure[0]["ts"] + measure[0]["dur"]) if measure else (float("-inf"), float("inf"))
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    streams = {tid for tid, name in lanes.items() if name.endswith(" stream")}  # the CUDA engine's streams
    gpu = [e for e in events if e.get("cat") in ("h2d", "decode", "assemble") and e.get("tid") in streams and lo <= e["ts"] <= hi]
    waits = [e for e in events if e.get("cat") == "wait" and lo <= e["ts"] <= hi]
    if not gpu:
        sys.exit("no GPU spans in the measured part of the trace (a CUDA engine run with --trace?)")
    # The batches the run popped in the window (a wave's spans name only
    # its first batch, so the spans' batch IDs undercount them).
    pops = [e for e in events if e.get("tid") == POP_ROW and e.get("ph") == "X" and lo <= e["ts"] <= hi]
    batches = pops or sorted({e["args"]["batch"] for e in gpu if "args" in e})
    per: Dict[str, List[float]] = defaultdict(list)
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["cat"] in ("decode", "assemble")]
    bursts = union(compute, args.merge_us)
    wall_us = (max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)) or 1.0
    n = len(batches)
    for cat in ("h2d", "decode", "assemble"):
        spans = [e for e in gpu if e["cat"] == cat]
        per[f"{cat}_spans"].append(len(spans) / n)
        per[f"{cat}_ms"].append(sum(e["dur"] for e in spans) / n / 1e3)
    waves = {(e["args"]["batch"], e["args"].get("wave"), e["tid"]) for e in gpu if e["cat"] == "decode"}
    busy = sum(e - s for s, e in bursts)
    report = {
        "batches": n,
        "waves_per_batch": len(waves) / n,
        "h2d_spans_per_batch": per["h2d_spans"][0],
        "decode_spans_per_batch": per["decode_spans"][0],
        "assemble_spans_per_batch": per["assemble_spans"][0],
        "h2d_ms_per_batch": per["h2d_ms"][0],
        "decode_ms_per_batch": per["decode_ms"][0],
        "assemble_ms_per_batch": per["assemble_ms"][0],
        "compute_bursts_per_batch": len(bursts) / n,
        "compute_busy_ms_per_batch": busy / n / 1e3,
        "burst_ms_median": statistics.median([(e - s) / 1e3 for s, e in bursts]),
        "compute_busy_share_pct": 100.0 * busy / wall_us,
        "retire_waits_per_batch": len(waits) / n,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    for k, v in report.items():
        print(f"{k:28} {v:.3f}" if isinstance(v, float) else f"{k:28} {v}")


if __name__ == "__main__":
    main()
