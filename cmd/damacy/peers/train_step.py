#!/usr/bin/env python3
"""The training step a loader feeds: a MONAI 3D UNet trained on the same crops
of the same OME-NGFF data, fed four ways, each measured against the same
model on batches already resident on the GPU (the ceiling).

    python cmd/damacy/peers/train_step.py --data /data/training [--json out.json]
    python cmd/damacy/peers/train_step.py --data /tmp/t --scenario tiny.json --device cpu --steps 30

The dataset is the built-in scenario ``training`` (``damacy gen training
DIR``, written when DIR does not hold it yet): 8 images of 1x256x512x512
uint16 (zstd level 3, 64^3 chunks in shards), each with a uint8 label image
``labels/cells`` (blobs of 3 values over about 5% of the voxels). Every batch
holds ``--batch-size`` crops of 128^3, two thirds centred on a foreground
voxel, each flipped along z, y and x and turned a quarter in y-x at p=0.5,
the image normalised (mean 16384, std 21000) and bfloat16, the label uint8.

Modes (each in a process of its own, one after the other, same host):

- ``ceiling``: the volumes are read once onto the GPU (normalised, bf16) and
  each batch is sliced, flipped and turned there: no loader at all.
- ``damacy``: ``damacy.Loader`` over a ``ForegroundSampler`` (fraction 0.67)
  with an image and a label source and ``Augment``, the default Config (a
  Loader's default engine: the server's host engine decodes and assembles,
  the trainer's process copies each batch onto the GPU in its own context).
  Its default chunk cache (host memory: a sixteenth of the host's, at most
  4 GiB, split between the image and the label, taking a chunk at its
  second miss) holds this dataset's decoded chunks after a few dozen steps.
- ``damacy-nocache``: the same with ``chunk_cache_bytes=-1`` (no chunk
  cache): what a dataset far larger than the cache costs, every chunk
  decoded at every read.
- ``damacy-cached``: the same with ``chunk_cache_bytes`` 4 GiB (the
  dataset's 1.6 GB of decoded chunks fit: later crops skip decoding; the
  cache takes every miss).
- ``damacy-cuda``: the same with ``Config(engine="cuda")``: the server's
  CUDA engine decodes with nvCOMP in a CUDA context of its own (GPU only).
- ``monai``: MONAI as its documentation writes a pipeline: ``Dataset`` +
  ``DataLoader`` (``--workers`` workers, persistent, pinned memory,
  prefetch 4), zarr-python reading each crop in the workers, its centre
  picked as ``RandCropByPosNegLabeld`` picks one (pos 2 : neg 1, from the
  label's foreground indices, computed once), ``RandFlipd`` x3,
  ``RandRotate90d``, ``NormalizeIntensityd``; copied with non_blocking and
  cast to bf16 on the GPU, MetaTensors on (as MONAI's tutorials write it).
- ``monai-fast``: the same with ``monai.data.set_track_meta(False)``, as
  MONAI's performance guide advises.
- ``torchio``: not run (``torchio.Queue`` needs its own image readers; not
  practical over zarr without writing a reader, which would measure that
  reader rather than TorchIO).

Models: ``unet`` (MONAI UNet, channels 16-32-64-128-256, strides 2, 2
residual units) and ``small`` (channels 8-16-32-64, 1 residual unit), both
with DiceCELoss, AdamW and bf16 autocast (on a GPU). Not run by default:
``tiny`` (channels 4-8-16-32, 1 residual unit; on an H200 its step took
as long as ``small``'s: the full-resolution layers and the loss set both), and
``probe``, one 1x1x1 convolution, trained the same way: its step takes a
few milliseconds, so each loader runs at what it can deliver, in the loop
and with the crops above (a faster GPU or a lighter model than this host's).

Per mode and model it reports steps/s and samples/s over the measured steps
(after the warm-up), % of the ceiling's steps/s, the step's GPU time (CUDA
events around forward, backward and the optimiser step), the GPU's idle
time between steps (from the end of one step to the start of the next, on
the trainer's stream, as a share of the wall), the CPU cores of the trainer
(its process: the training thread, the loader's client, the pinning thread)
and of the loader (the damacy server, or the DataLoader's workers), and the
GPU memory of the trainer (torch's peak reserved) and of the loader (the
device memory that appeared when it started). ``--device cpu`` runs every
mode on the CPU (damacy's host engine, f32 images): that is how CI checks
that each mode trains and its loss falls (tests/test_train_step.py).

``--ranks N`` runs each mode under torchrun, one process per rank (NCCL and
LOCAL_RANK's GPU, or gloo on the CPU), the model in DistributedDataParallel:
damacy's sampler splits each epoch's draws by rank, MONAI's DataLoader takes
a DistributedSampler, the ceiling slices crops of its own on each rank's
GPU. Every rank's row is reported, its % against that rank's own ceiling;
the loader's cores are each rank's server or workers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import gather_rows  # noqa: E402

MEAN, STD = 16384.0, 21000.0  # the images' intensity map, as damacy's Augment and MONAI's NormalizeIntensityd apply it
CLASSES = 4  # background and the blobs' 3 label values
POS_FRACTION = 2 / 3  # RandCropByPosNegLabeld's pos=2, neg=1; damacy's fraction 0.67

MODELS = {
    "unet": dict(channels=(16, 32, 64, 128, 256), strides=(2, 2, 2, 2), num_res_units=2),
    "small": dict(channels=(8, 16, 32, 64), strides=(2, 2, 2), num_res_units=1),
    "tiny": dict(channels=(4, 8, 16, 32), strides=(2, 2, 2), num_res_units=1),
    "probe": None,  # one 1x1x1 convolution: the loader's own pace
}
MODES = ("ceiling", "damacy", "damacy-nocache", "damacy-cached", "damacy-cuda", "monai", "monai-fast")


# -- the data ------------------------------------------------------------------


def ensure_dataset(data: str, scenario: str) -> List[str]:
    """The dataset's image directories, generated with the installed
    package's damacy binary when data does not hold it yet."""
    import damacy._server as srv

    if not os.path.exists(os.path.join(data, "damacy-dataset.json")):
        subprocess.run([srv.binary_path(), "gen", scenario, data], check=True, stdout=sys.stderr)
    return sorted(os.path.join(data, d) for d in os.listdir(data) if d.startswith("a") and d[1:].isdigit())


def arrays(image: str) -> Tuple[Any, Any]:
    """An image's level-0 array and its label's, through zarr-python."""
    import zarr

    return zarr.open_array(os.path.join(image, "0"), mode="r"), zarr.open_array(
        os.path.join(image, "labels", "cells", "0"), mode="r"
    )


def foreground(images: List[str]) -> List[np.ndarray]:
    """Each label's foreground voxels as flat indices (what MONAI's
    FgBgToIndicesd caches for RandCropByPosNegLabeld)."""
    return [np.flatnonzero(arrays(im)[1][...]) for im in images]


def pick_start(rng: np.random.Generator, fg: np.ndarray, shape: Tuple[int, ...], box: int) -> Tuple[int, ...]:
    """A box's start (z, y, x): centred on a foreground voxel with
    probability POS_FRACTION (else on any voxel), then moved inside the
    volume, as RandCropByPosNegLabeld does."""
    if len(fg) and rng.random() < POS_FRACTION:
        centre = np.unravel_index(fg[rng.integers(len(fg))], shape)
    else:
        centre = tuple(int(rng.integers(n)) for n in shape)
    return tuple(int(min(max(c - box // 2, 0), n - box)) for c, n in zip(centre, shape))


# -- the feeds: each yields (image [n,1,b,b,b] float on dev, label [n,1,b,b,b] long on dev) --


def ceiling_feed(images: List[str], args: argparse.Namespace, dev: Any, dtype: Any):
    """Crops sliced from volumes already on the device: no loader."""
    import torch

    vols, labs = [], []
    for im in images:
        a, lab = arrays(im)
        vols.append(((torch.from_numpy(a[0].astype(np.float32)) - MEAN) / STD).to(dev, dtype))
        labs.append(torch.from_numpy(lab[...]).to(dev))
    fg = [np.flatnonzero(lab.cpu().numpy()) for lab in labs]
    rng = np.random.default_rng(args.seed)
    b = args.box

    def crop(t: Any, s: Tuple[int, ...], flips: List[int], k: int) -> Any:
        c = t[s[0] : s[0] + b, s[1] : s[1] + b, s[2] : s[2] + b]
        if flips:
            c = torch.flip(c, flips)
        return torch.rot90(c, k, (1, 2)) if k else c

    while True:
        xs, ys = [], []
        for _ in range(args.batch_size):
            i = int(rng.integers(len(vols)))
            s = pick_start(rng, fg[i], tuple(vols[i].shape), b)
            flips = [d for d in range(3) if rng.random() < 0.5]
            k = int(rng.integers(1, 4)) if rng.random() < 0.5 else 0
            xs.append(crop(vols[i], s, flips, k))
            ys.append(crop(labs[i], s, flips, k))
        yield torch.stack(xs)[:, None], torch.stack(ys)[:, None].long()


def damacy_feed(
    images: List[str], args: argparse.Namespace, dev: Any, dtype: Any, info: Dict[str, Any], engine: Optional[str], cache: int = 0
):
    """damacy.Loader over a ForegroundSampler, image and label, Augment;
    engine None (the Loader's default: the host engine, batches copied in
    the trainer's context) or "cuda" (the server's CUDA engine); cache the
    chunk cache's bytes (0: the default, -1: none)."""
    import damacy

    cuda = dev.type == "cuda"
    sampler = damacy.ForegroundSampler(
        [{"uri": im, "label": im + "/labels/cells"} for im in images],
        (1, args.box, args.box, args.box),
        fraction=0.67,
        seed=args.seed,
        infinite=True,
    )
    cfg = damacy.Config(
        batch_size=args.batch_size,
        host_buffer_bytes=0,  # the engine's defaults
        device_buffer_bytes=0,
        device=None if cuda else "cpu",
        engine=engine if cuda else None,
        chunk_cache_bytes=cache,
        n_compute_threads=args.loader_threads,  # 0: the default, every core (its share under torchrun)
        sources=(
            damacy.Source("image", dtype="bf16" if cuda else "f32"),
            damacy.Source("label", label="cells", dtype="u8"),
        ),
        augment=damacy.Augment(
            seed=args.seed,
            flip=((1, 0.5), (2, 0.5), (3, 0.5)),  # z, y, x of the image's c, z, y, x
            rot90=(((2, 3), 0.5),),  # quarter turns in y-x
            mean=MEAN,
            std=STD,
            intensity_sources=("image",),
        ),
    )
    loader = damacy.Loader(cfg, sampler)
    info["loader_pids"] = [loader.pipeline.server_info["pid"]]
    info["decoder"] = loader.pipeline.server_info.get("decoder")
    info["engine"] = loader.pipeline.server_info.get("engine")
    info["loader_threads"] = loader.pipeline.config.n_compute_threads  # as the server was asked
    try:
        for batch in loader:
            x = batch["image"]  # [n, 1, b, b, b] on dev
            y = batch["label"][:, None].long()  # [n, 1, b, b, b]
            yield x, y
    finally:
        loader.close()


def crop_transform(box: int, fgs: List[np.ndarray]) -> Any:
    """A MONAI map transform that reads one crop of an image and its label
    with zarr-python, its centre picked as RandCropByPosNegLabeld picks one
    (from cached foreground indices); monai.data.DataLoader seeds it in each
    worker."""
    from monai.transforms import Randomizable

    class ZarrCropd(Randomizable):
        def __init__(self) -> None:
            self.rng = np.random.default_rng(0)
            self.opened: Dict[str, Tuple[Any, Any]] = {}

        def set_random_state(self, seed: Optional[int] = None, state: Any = None) -> "ZarrCropd":
            super().set_random_state(seed, state)
            self.rng = np.random.default_rng(seed)
            return self

        def randomize(self, data: Any = None) -> None:
            pass

        def __call__(self, d: Dict[str, Any]) -> Dict[str, Any]:
            im = d["image"]
            if im not in self.opened:  # opened once per worker
                self.opened[im] = arrays(im)
            a, lab = self.opened[im]
            s = pick_start(self.rng, fgs[d["index"]], tuple(lab.shape), box)
            z, y, x = (slice(v, v + box) for v in s)
            return {"image": a[0:1, z, y, x].astype(np.float32), "label": lab[z, y, x][None]}

    return ZarrCropd()


def monai_feed(images: List[str], args: argparse.Namespace, dev: Any, dtype: Any, info: Dict[str, Any], fast: bool):
    """MONAI's Dataset + DataLoader with its transforms, zarr-python reads."""
    import monai
    import torch
    from monai.transforms import Compose, NormalizeIntensityd, RandFlipd, RandRotate90d

    # "monai" keeps MetaTensors on, as MONAI's tutorials write a pipeline;
    # "monai-fast" turns them off, as its performance guide advises.
    monai.data.set_track_meta(not fast)
    fgs = foreground(images)
    keys = ["image", "label"]
    transform = Compose(
        [
            crop_transform(args.box, fgs),
            RandFlipd(keys, prob=0.5, spatial_axis=0),
            RandFlipd(keys, prob=0.5, spatial_axis=1),
            RandFlipd(keys, prob=0.5, spatial_axis=2),
            RandRotate90d(keys, prob=0.5, max_k=3, spatial_axes=(1, 2)),
            NormalizeIntensityd("image", subtrahend=MEAN, divisor=STD),
        ]
    ).set_random_state(seed=args.seed)
    n = args.batch_size * (args.steps + args.warmup + 8) * int(os.environ.get("WORLD_SIZE", 1))
    data = [{"image": images[i % len(images)], "index": i % len(images)} for i in range(n)]
    ds = monai.data.Dataset(data, transform=transform)
    cuda = dev.type == "cuda"
    ddp = "WORLD_SIZE" in os.environ
    dl = monai.data.DataLoader(  # torch's, with MONAI's per-worker seeding
        ds,
        batch_size=args.batch_size,
        shuffle=not ddp,
        sampler=torch.utils.data.distributed.DistributedSampler(ds) if ddp else None,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=cuda,
        prefetch_factor=4 if args.workers > 0 else None,
    )
    it = iter(dl)
    info["loader_pids"] = [w.pid for w in getattr(it, "_workers", [])]
    plain = lambda t: t.as_tensor() if hasattr(t, "as_tensor") else torch.as_tensor(t)  # noqa: E731  (a MetaTensor's data)
    for b in it:
        x = plain(b["image"]).to(dev, non_blocking=True).to(dtype)
        y = plain(b["label"]).to(dev, non_blocking=True).long()
        yield x, y


# -- one mode, one model -------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of process pid (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def own_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def device_used(torch: Any, dev: Any) -> int:
    if dev.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(dev)
    return total - free


def run_one(mode: str, model_name: str, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Trains model_name fed by mode; its row, or under torchrun every
    rank's (on rank 0; the others return none)."""
    import torch
    from monai.losses import DiceCELoss
    from monai.networks.nets import UNet

    cuda = args.device == "cuda"
    distributed = "WORLD_SIZE" in os.environ  # under torchrun
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(args.seed)
    args.seed += rank  # each rank its own crops (damacy's sampler splits the draws by rank itself)
    images = ensure_dataset(args.data, args.scenario)
    info: Dict[str, Any] = {"mode": mode, "model": model_name, "device": args.device, "rank": rank, "world": world, "cudnn_benchmark": args.cudnn_benchmark, "compile": args.compile}
    if cuda:
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
        torch.cuda.init()
        torch.zeros(1, device=dev)  # the trainer's context first
        info["gpu"] = torch.cuda.get_device_name(dev)
    used0 = device_used(torch, dev)
    feeds = {"ceiling": lambda: ceiling_feed(images, args, dev, dtype), "damacy": lambda: damacy_feed(images, args, dev, dtype, info, None), "damacy-cuda": lambda: damacy_feed(images, args, dev, dtype, info, "cuda"), "damacy-nocache": lambda: damacy_feed(images, args, dev, dtype, info, None, -1), "damacy-cached": lambda: damacy_feed(images, args, dev, dtype, info, None, 4 << 30), "monai": lambda: monai_feed(images, args, dev, dtype, info, False), "monai-fast": lambda: monai_feed(images, args, dev, dtype, info, True)}
    feed = feeds[mode]()
    first = next(feed)  # the loader started and one batch out
    if cuda:
        torch.cuda.synchronize(dev)
    info["loader_gpu_bytes"] = device_used(torch, dev) - used0 if mode != "ceiling" else 0
    arch = MODELS[model_name]
    if arch is None:
        model = torch.nn.Conv3d(1, CLASSES, 1).to(dev)
    else:
        model = UNet(spatial_dims=3, in_channels=1, out_channels=CLASSES, **arch).to(dev)
    if distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[dev.index] if cuda else None)
        dist.barrier()
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=args.compile or None)
    step_loss = lambda x, y: loss_fn(model(x), y)  # noqa: E731
    if args.compile:  # the model and its loss as fused kernels: less GPU work per step
        step_loss = torch.compile(step_loss)
    losses: List[Any] = []
    starts, ends = [], []
    total = args.warmup + args.steps
    cpu0 = wall0 = lcpu0 = 0.0
    pids: List[int] = []
    batch: Optional[Tuple[Any, Any]] = first
    for step in range(total):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize(dev)
            pids = list(info.get("loader_pids") or [])
            wall0, cpu0 = time.perf_counter(), own_cpu_seconds()
            lcpu0 = sum(cpu_seconds(p) for p in pids)
        x, y = batch if batch is not None else next(feed)
        batch = None
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = step_loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if cuda and step >= args.warmup:
            e.record()
            starts.append(s)
            ends.append(e)
    if cuda:
        torch.cuda.synchronize(dev)
    wall = time.perf_counter() - wall0
    cpu = own_cpu_seconds() - cpu0
    lcpu = sum(cpu_seconds(p) for p in pids) - lcpu0
    info.pop("loader_pids", None)
    loss_values = [float(v) for v in torch.stack(losses).float().cpu()]
    k = max(1, min(10, len(loss_values) // 3))
    info.update(
        steps=args.steps,
        batch_size=args.batch_size,
        steps_per_s=args.steps / wall,
        samples_per_s=args.steps * args.batch_size / wall,
        trainer_cores=cpu / wall,
        loader_cores=lcpu / wall,
        loss_first=float(np.mean(loss_values[:k])),
        loss_last=float(np.mean(loss_values[-k:])),
        finite=bool(np.all(np.isfinite(loss_values))),
    )
    if cuda:
        gpu = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        gaps = [ends[i].elapsed_time(starts[i + 1]) for i in range(len(starts) - 1)]
        info.update(
            step_gpu_ms=float(np.mean(gpu)),
            idle_pct=100.0 * sum(max(g, 0.0) for g in gaps) / (wall * 1e3),
            trainer_gpu_bytes=int(torch.cuda.max_memory_reserved(dev)),
        )
    feed.close()
    if distributed:
        rows = gather_rows(dist, args.data, f".rows-{mode}-{model_name}", rank, world, info)
        dist.destroy_process_group()
        return rows
    return [info]



# -- the driver ----------------------------------------------------------------


def table(rows: List[Dict[str, Any]]) -> str:
    out = [
        "| model | loader | steps/s | samples/s | of ceiling | step GPU ms | GPU idle | trainer cores | loader cores | trainer GPU GiB | loader GPU GiB | loss first -> last |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['mode']} | failed: {r['error']} |")
            continue
        gib = lambda v: f"{v / 2**30:.2f}" if v is not None else "-"  # noqa: E731
        who = r["mode"] if r.get("world", 1) == 1 else f"{r['mode']} rank {r['rank']}"
        out.append(
            f"| {r['model']} | {who} | {r['steps_per_s']:.2f} | {r['samples_per_s']:.1f} | "
            f"{r.get('of_ceiling_pct', float('nan')):.1f}% | {r.get('step_gpu_ms', float('nan')):.1f} | "
            f"{r.get('idle_pct', float('nan')):.1f}% | {r['trainer_cores']:.2f} | {r['loader_cores']:.2f} | "
            f"{gib(r.get('trainer_gpu_bytes'))} | {gib(r.get('loader_gpu_bytes'))} | {r['loss_first']:.3f} -> {r['loss_last']:.3f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="dataset directory (generated when it holds none)")
    ap.add_argument("--scenario", default="training", help="the scenario whose dataset --data holds (a name or a file)")
    ap.add_argument("--modes", default=None, help="comma-separated, of %s (default: all; on the CPU all but damacy-nocache, damacy-cached and damacy-cuda)" % ", ".join(MODES))
    ap.add_argument("--models", default="unet,small")
    ap.add_argument("--steps", type=int, default=200, help="measured steps")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--box", type=int, default=128)
    ap.add_argument("--workers", type=int, default=12, help="MONAI's DataLoader workers")
    ap.add_argument("--loader-threads", type=int, default=0,
                    help="damacy's n_compute_threads (0: the default, every core or the rank's share)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark = True in every mode (cuDNN picks its fastest convolutions; MONAI's fast-training tutorial sets it)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model and its loss and use the fused AdamW in every mode: fused kernels, a step with less GPU work")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--ranks", type=int, default=1, help="ranks under torchrun (one process per rank; NCCL on GPUs, gloo on the CPU)")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # MODE,MODEL: run one in this process
    args = ap.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.modes is None:
        args.modes = ",".join(m for m in MODES if args.device == "cuda" or m not in ("damacy-cuda", "damacy-cached", "damacy-nocache"))
    if args.one:
        mode, model = args.one.split(",")
        for row in run_one(mode, model, args):
            print("ROW " + json.dumps(row), flush=True)
        return
    ensure_dataset(args.data, args.scenario)
    rows: List[Dict[str, Any]] = []
    keep = ("data", "scenario", "steps", "warmup", "batch_size", "box", "workers", "loader_threads", "lr", "seed", "device")
    base = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in keep] + ["--cudnn-benchmark"] * args.cudnn_benchmark + ["--compile"] * args.compile
    launch = [sys.executable]
    if args.ranks > 1:  # one process per rank, as a training job runs
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}"]
    for model in args.models.split(","):
        ceiling: Dict[int, float] = {}
        for mode in args.modes.split(","):
            p = subprocess.run([*launch, __file__, *base, "--one", f"{mode},{model}"], stdout=subprocess.PIPE, text=True)
            got = [json.loads(line[4:]) for line in p.stdout.splitlines() if line.startswith("ROW ")]
            if p.returncode != 0 or not got:
                got = [{"mode": mode, "model": model, "rank": 0, "error": f"exit {p.returncode}"}]
            for row in got:
                if mode == "ceiling" and "error" not in row:
                    ceiling[row["rank"]] = row["steps_per_s"]
                if row.get("rank") in ceiling and "error" not in row:
                    row["of_ceiling_pct"] = 100.0 * row["steps_per_s"] / ceiling[row["rank"]]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
