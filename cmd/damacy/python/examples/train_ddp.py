"""Train a small 3D conv net with DDP, each rank fed by its own damacy loader.

    torchrun --nproc-per-node=2 train_ddp.py --data /tmp/damacy-ddp

Rank 0 generates a synthetic OME-NGFF dataset with ``damacy gen`` when DATA
holds none; every rank then streams its share of random 3D crops onto its own
GPU (``damacy.Pipeline`` binds LOCAL_RANK's GPU and starts one ``damacy
serve`` per rank) and trains a denoising autoencoder on them. The shares are
disjoint and reshuffled every epoch (``damacy.distributed.DistributedSamples``),
and a share need not be a multiple of the batch size: each epoch flushes, and
its last batch is short.

Without GPUs the ranks use gloo and the host engine (``--cpu``), which is how
the example is checked on a machine without CUDA.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import damacy
from damacy.distributed import DistributedSamples

SHAPE = (64, 256, 256)  # each generated array
BOX = (32, 64, 64)  # each crop


def damacy_binary() -> str:
    return os.environ.get("DAMACY_BINARY") or str(Path(damacy.__file__).parent / "bin" / "damacy")


def make_dataset(data: Path, arrays: int) -> list[Path]:
    """Write the dataset (rank 0 only; gen skips a directory that holds it)."""
    shape = ",".join(map(str, SHAPE))
    subprocess.run([damacy_binary(), "gen", "--arrays", str(arrays), "--shape", shape, "smoke", str(data)],
                   check=True)
    return sorted(p for p in data.iterdir() if p.name.startswith("a") and p.is_dir())


def random_samples(images: list[Path], n: int, seed: int) -> list[damacy.Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        img = rng.choice(images)
        lo = [rng.randrange(0, s - b + 1) for s, b in zip(SHAPE, BOX)]
        out.append(damacy.Sample(uri=str(img), aabb=[(a, a + b) for a, b in zip(lo, BOX)]))
    return out


class Denoiser(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.enc1 = nn.Conv3d(1, width, 3, padding=1)
        self.enc2 = nn.Conv3d(width, 2 * width, 3, stride=2, padding=1)
        self.dec1 = nn.ConvTranspose3d(2 * width, width, 2, stride=2)
        self.out = nn.Conv3d(2 * width, 1, 3, padding=1)

    def forward(self, x):
        a = F.relu(self.enc1(x))
        b = F.relu(self.enc2(a))
        c = F.relu(self.dec1(b))
        return self.out(torch.cat([a, c], dim=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="dataset directory (generated when empty)")
    ap.add_argument("--arrays", type=int, default=4)
    ap.add_argument("--samples", type=int, default=512, help="crops per epoch, all ranks together")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--cpu", action="store_true", help="gloo and the host engine, no GPU")
    args = ap.parse_args()

    use_cuda = torch.cuda.is_available() and not args.cpu
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")

    if rank == 0:
        args.data.mkdir(parents=True, exist_ok=True)
        make_dataset(args.data, args.arrays)
    dist.barrier()
    images = sorted(p for p in args.data.iterdir() if p.name.startswith("a") and p.is_dir())
    samples = random_samples(images, args.samples, seed=1234)  # the same list on every rank
    share = DistributedSamples(samples, seed=7)

    model = DDP(Denoiser().to(dev), device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    cfg = damacy.Config(batch_size=args.batch_size, host_buffer_bytes=256 << 20, device_buffer_bytes=256 << 20,
                        dtype="f32", device=None if use_cuda else "cpu")

    with damacy.Pipeline(cfg) as loader:  # binds LOCAL_RANK's GPU, its own server
        for epoch in range(args.epochs):
            share.set_epoch(epoch)
            loader.push(share)
            loader.flush()  # no more samples this epoch: the last batch may be short
            t0, seen, total = time.perf_counter(), 0, 0.0
            while seen < len(share):  # every rank's share has the same length
                with loader.pop() as b:
                    x = torch.from_dlpack(b).unsqueeze(1)  # [n, 1, 32, 64, 64], zero-copy; n < batch size at the end
                    x = (x - x.mean()) / (x.std() + 1e-6)
                    noisy = x + 0.3 * torch.randn_like(x)
                    loss = F.mse_loss(model(noisy), x)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    seen += x.shape[0]
                    total += loss.item() * x.shape[0]
            stats = torch.tensor([seen, total], dtype=torch.float64, device=dev)
            dist.all_reduce(stats)
            if rank == 0:
                dt = time.perf_counter() - t0
                print(f"epoch {epoch}: {int(stats[0])} crops on {world} ranks, "
                      f"loss {stats[1] / stats[0]:.4f}, {stats[0] / dt:.0f} crops/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
