#!/usr/bin/env python3
"""The Python front in the loop a training script writes, on a bench run's boxes.

    damacy bench --json --boxes-out boxes.json throughput > inprocess.json
    python cmd/damacy/peers/python_front.py boxes.json --bench inprocess.json [--json]
    torchrun --nproc-per-node=4 cmd/damacy/peers/python_front.py boxes.json
    python cmd/damacy/peers/python_front.py boxes.json --duration 600   # a soak

It imports the installed `damacy` package (the wheel, which starts its own
`damacy serve`) and reads the boxes of the bench run with the Config a user
writes: the run's batch_size and dtype, everything else the default. Each
batch goes through the loop every training script has, the tensor alive
until the next iteration:

    b = p.pop()
    x = torch.from_dlpack(b)
    step(x)                       # a reduction over the whole batch on the GPU
    b.release(torch.cuda.current_stream())

Without a GPU (torch sees none) the batches are host memory, from the host
engine, and the step reads one element of each 4 KiB page of the batch, so
that the cores stay the loader's (as zarrs_compare.py's peer only decodes).

Throughput is reported as damacy bench reports it: output-tensor bytes /
wall time of the measured batches (after the warm-up batches), the consumer's
stream synchronised at the end; start-up is the time from Pipeline() to the
first batch popped. With --bench (the in-process run's --json report of the
same boxes) the in-process figure and the ratio are printed beside it.

Under torchrun each rank reads all the boxes on its own GPU (LOCAL_RANK's,
the package's default binding) with its own server; rank 0 prints every
rank's figure and their sum over the slowest rank's wall (gloo is used only
for a barrier before the measured batches and to gather the figures).

--duration S runs the measured batches for S seconds (the boxes again and
again) and samples every 10 s: the client's and the server's RSS and open
descriptors, the GPU's used memory, and the cuda.shm.* files in /dev/shm; it
says whether each stayed flat.
"""

import argparse
import itertools
import json
import os
import sys
import time

import torch

import damacy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import gather_rows  # noqa: E402

GB = 1e9


def samples_of(boxes, repeat):
    """The boxes file's samples as damacy Samples, warm-up first; again and
    again when repeat."""
    base = boxes["dataset_dir"].rstrip("/")
    level = boxes.get("level", 0)
    arrays = [f"{base}/{a}" for a in boxes["arrays"]]
    one = [damacy.Sample(uri=arrays[s["array"]], aabb=[tuple(r) for r in s["box"]], level=level)
           for s in boxes["samples"]]
    return itertools.cycle(one) if repeat else iter(one)


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def shm_files():
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith("cuda.shm."))
    except FileNotFoundError:
        return []


def gpu_used(device):
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free


class Soak:
    """Samples memory, descriptors and /dev/shm every period seconds."""

    def __init__(self, server_pid, device, period=10.0):  # device: a GPU's
        self.server_pid, self.device, self.period = server_pid, device, period
        self.rows = []
        self.next = 0.0

    def maybe(self, t, batches):
        if t < self.next:
            return
        self.next = t + self.period
        self.rows.append({
            "t_s": round(t, 1), "batches": batches,
            "client_rss": rss_bytes(os.getpid()), "server_rss": rss_bytes(self.server_pid),
            "client_fds": open_fds(os.getpid()), "server_fds": open_fds(self.server_pid),
            "gpu_used": gpu_used(self.device), "shm_files": len(shm_files()),
        })

    def verdict(self):
        """Each series' first and last sample after the first minute (or
        the first third), the largest, and whether it stayed flat."""
        rows = self.rows[max(1, min(6, len(self.rows) // 3)):] or self.rows
        out = {}
        for k in ("client_rss", "server_rss", "client_fds", "server_fds", "gpu_used", "shm_files"):
            first, last, top = rows[0][k], rows[-1][k], max(r[k] for r in rows)
            slack = 0 if k.endswith(("fds", "files")) else max(first // 50, 16 << 20)  # 2% or 16 MiB of noise
            out[k] = {"first": first, "last": last, "max": top, "flat": top <= first + slack}
        return out


def run(boxes, args, rank, world):
    dtype = args.dtype or ("bf16" if boxes["dtype"] in ("bfloat16", "bf16") else "f32")
    bs = int(boxes["batch_size"])
    warmup, measured = int(boxes["warmup"]), int(boxes["batches"])
    elem = damacy.Dtype.coerce(dtype).itemsize
    per_sample = elem
    for n in boxes["sample_shape"]:
        per_sample *= int(n)

    extra = {k: int(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    cfg = damacy.Config(batch_size=bs, host_buffer_bytes=0, device_buffer_bytes=0, dtype=dtype, engine=args.engine, **extra)
    t0 = time.perf_counter()
    p = damacy.Pipeline(cfg)
    t_new = time.perf_counter() - t0
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    acc = torch.zeros((), dtype=torch.float32, device=device)

    def step(x):
        if gpu:
            acc.add_(x.sum(dtype=torch.float32))
        else:  # one element a page: the cores stay the loader's
            acc.add_(x.reshape(-1)[:: 4096 // elem].sum(dtype=torch.float32))

    def sync():
        if gpu:
            torch.cuda.synchronize()

    soak = Soak(p.server_info["pid"], device) if args.duration else None
    out_bytes = 0
    batches = 0
    start = None
    x = None
    shm_before = shm_files()
    try:
        p.push(samples_of(boxes, repeat=bool(args.duration)))
        if not args.duration:
            p.flush()
        total = warmup + (measured if not args.duration else 1 << 62)
        for i in range(total):
            if i == warmup:
                sync()
                if world > 1:
                    import torch.distributed as dist
                    dist.barrier()
                start = time.perf_counter()
            elif args.duration and start is not None and time.perf_counter() - start >= args.duration:
                break
            b = p.pop()
            if i == 0:
                t_first = time.perf_counter() - t0
            x = torch.from_dlpack(b)
            step(x)
            b.release(torch.cuda.current_stream() if gpu else None)
            if start is not None:
                out_bytes += x.shape[0] * per_sample
                batches += 1
                if soak:
                    soak.maybe(time.perf_counter() - start, batches)
        sync()
        wall = time.perf_counter() - start
        del x
    finally:
        p.close()
    res = {
        "rank": rank, "device": str(device), "gpu": torch.cuda.get_device_name(device) if gpu else None,
        "dtype": dtype, "batch_size": bs, "batches": batches, "wall_s": wall,
        "output_gbps": out_bytes / wall / GB, "samples_per_s": batches * bs / wall,
        "startup_s": t_first, "pipeline_new_s": t_new, "checksum": float(acc.item()),
        "server": p.server_info.get("server"), "decoder": p.server_info.get("decoder"),
        "slots": p.server_info.get("slots"), "config": extra,
    }
    if soak:
        res["soak"] = {"rows": soak.rows, "verdict": soak.verdict()}
    time.sleep(0.5)  # the server has exited: its files must be gone
    res["shm_new_files"] = sorted(set(shm_files()) - set(shm_before))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("boxes", help="the JSON file `damacy bench --boxes-out` wrote")
    ap.add_argument("--bench", help="the in-process run's `damacy bench --json` report of the same boxes")
    ap.add_argument("--duration", type=float, default=0, help="run the measured batches this many seconds (a soak)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=N",
                    help="set an integer Config field (to compare with the defaults, which the targets use)")
    ap.add_argument("--engine", choices=("cuda", "host"), help="Config.engine (default: the package's)")
    ap.add_argument("--dtype", choices=[d.wire_name for d in damacy.Dtype], help="the output dtype (default: the bench run's)")
    ap.add_argument("--json", action="store_true", help="write the result as JSON")
    args = ap.parse_args()
    with open(args.boxes) as f:
        boxes = json.load(f)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if "LOCAL_RANK" in os.environ:  # the GPU damacy binds by default
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    res = run(boxes, args, rank, world)
    if world > 1:
        import torch.distributed as dist
        boxes_dir = os.path.dirname(os.path.abspath(args.boxes))
        every = gather_rows(dist, boxes_dir, os.path.basename(args.boxes) + ".rank", rank, world, res)
        dist.destroy_process_group()
        if rank != 0:
            return
        wall = max(r["wall_s"] for r in every)
        total = sum(r["output_gbps"] * r["wall_s"] for r in every) / wall
        res = {"ranks": every, "world": world, "output_gbps": total, "wall_s": wall}
    if args.bench:
        with open(args.bench) as f:
            rep = json.load(f)
        res["inprocess_gbps"] = rep["output_gbps"]
        res["ratio"] = res["output_gbps"] / rep["output_gbps"]
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
        return
    for r in res.get("ranks", [res]):
        print(f"rank {r['rank']} {r['device']} ({r['gpu']}): {r['output_gbps']:.2f} GB/s of {r['dtype']}, "
              f"{r['samples_per_s']:.0f} samples/s, {r['batches']} batches in {r['wall_s']:.2f} s; "
              f"start-up {r['startup_s']:.2f} s (Pipeline() {r['pipeline_new_s']:.2f} s); "
              f"{r['slots']} slots; new /dev/shm files after close: {r['shm_new_files'] or 'none'}")
        if "soak" in r:
            for k, v in r["soak"]["verdict"].items():
                print(f"  {k:11s} first {v['first']:>14,} last {v['last']:>14,} max {v['max']:>14,} "
                      f"{'flat' if v['flat'] else 'GREW'}")
    if "world" in res:
        print(f"{res['world']} ranks: {res['output_gbps']:.2f} GB/s together")
    if "inprocess_gbps" in res:
        print(f"in-process (damacy bench, same boxes): {res['inprocess_gbps']:.2f} GB/s; "
              f"Python front {res['ratio']:.1%} of it")


if __name__ == "__main__":
    main()
