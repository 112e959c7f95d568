"""Gathering every rank's result on rank 0 at the end of a torchrun job, for
the peers that run under torchrun on one host (train_step.py,
python_front.py)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List


def gather_rows(dist: Any, folder: str, tag: str, rank: int, world: int, row: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every rank's row on rank 0 (the others get []), through files in
    folder (the ranks share a host) and a barrier. Not all_gather_object:
    its tensors have Python objects, and a gloo worker thread may free them
    after the process has begun to exit, which aborts it ("terminate called
    without an active exception": the thread cannot take the GIL then)."""
    path = os.path.join(folder, f"{tag}.{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(row, f)
    os.replace(path + ".tmp", path)
    dist.barrier()
    if rank != 0:
        return []
    rows = []
    for r in range(world):
        other = os.path.join(folder, f"{tag}.{r}.json")
        with open(other) as f:
            rows.append(json.load(f))
        os.remove(other)
    return rows
