"""Train a small 3D U-Net to segment blobs, fed by damacy.Loader.

    python train_unet3d.py --data /tmp/blobs --device cpu --steps 50
    torchrun --nproc-per-node=2 train_unet3d.py --data /tmp/blobs --device cuda

Writes a small OME-NGFF dataset with zarr-python first (rank 0, once): uint16
images of noisy blobs, each with a label image ``labels/blobs`` (uint8: 0 the
background, 1 and 2 the blobs' classes, class 2 brighter). Each rank then
draws its share of boxes, half of them centred on a blob
(``damacy.ForegroundSampler``, ranks from RANK / WORLD_SIZE), and reads the
image (bfloat16 on a GPU, float32 on the CPU) and the label (uint8) of every
box through one ``damacy.Loader``, damacy flipping, turning and normalising
each sample as it assembles the batch (the label moves with the image). The
loss is the cross-entropy of the label.

On a GPU each rank uses LOCAL_RANK's (nccl); ``--device cpu`` runs the host
engine (gloo under torchrun), which is how the example is checked without CUDA.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import damacy

SHAPE = (48, 96, 96)  # each image, z y x
BOX = (32, 32, 32)  # each crop
CLASSES = 3
MEAN, STD = 150.0, 100.0  # about the images' intensity statistics


def write_image(path: Path, data: np.ndarray, **ome) -> None:
    """An OME-NGFF 0.5 image (z, y, x) of one level."""
    import zarr

    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.create_array("0", shape=data.shape, dtype=data.dtype, chunks=(16, 32, 32))[:] = data
    axes = [{"name": a, "type": "space"} for a in "zyx"]
    scale = [{"type": "scale", "scale": [1.0, 1.0, 1.0]}]
    g.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": scale}]}], **ome}


def make_dataset(data: Path, n: int = 3, seed: int = 0) -> None:
    """n images of blobs with their labels (kept when data holds them)."""
    import zarr

    if (data / "done").exists():
        return
    rng = np.random.default_rng(seed)
    z, y, x = np.ogrid[: SHAPE[0], : SHAPE[1], : SHAPE[2]]
    for i in range(n):
        label = np.zeros(SHAPE, np.uint8)
        for _ in range(24):
            c, r = rng.uniform(0, SHAPE), rng.uniform(4, 10)
            label[(z - c[0]) ** 2 + (y - c[1]) ** 2 + (x - c[2]) ** 2 < r * r] = rng.integers(1, CLASSES)
        image = rng.normal(100, 25, SHAPE) + 120 * label  # class 1 about 220, class 2 about 340
        path = data / f"img{i}.zarr"
        write_image(path, image.clip(0, 65535).astype(np.uint16))
        zarr.open_group(str(path / "labels"), mode="w", zarr_format=3).attrs["ome"] = {
            "version": "0.5", "labels": ["blobs"]}
        write_image(path / "labels" / "blobs", label, **{"image-label": {"version": "0.5"}})
    (data / "done").touch()


def block(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.ReLU(inplace=True),
        nn.Conv3d(cout, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.ReLU(inplace=True),
    )


class UNet3D(nn.Module):
    """Two poolings down, two transposed convolutions up, skips between."""

    def __init__(self, classes: int, width: int = 8) -> None:
        super().__init__()
        w = width
        self.enc1, self.enc2, self.mid = block(1, w), block(w, 2 * w), block(2 * w, 4 * w)
        self.up2, self.dec2 = nn.ConvTranspose3d(4 * w, 2 * w, 2, stride=2), block(4 * w, 2 * w)
        self.up1, self.dec1 = nn.ConvTranspose3d(2 * w, w, 2, stride=2), block(2 * w, w)
        self.head = nn.Conv3d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool3d(e1, 2))
        m = self.mid(F.max_pool3d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="dataset directory (written when empty)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=4, help="per rank")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    cuda = args.device == "cuda"
    distributed = "WORLD_SIZE" in os.environ  # under torchrun
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    dev = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    torch.manual_seed(0)

    if rank == 0:
        args.data.mkdir(parents=True, exist_ok=True)
        make_dataset(args.data)
    if distributed:
        dist.barrier()
    images = sorted(str(p) for p in args.data.glob("img*.zarr"))

    # Boxes centred on a blob half of the time; this rank's share of each
    # step's draws (RANK, WORLD_SIZE), endless.
    sampler = damacy.ForegroundSampler(
        [{"uri": p, "label": p + "/labels/blobs"} for p in images], BOX, seed=1, infinite=True)
    cfg = damacy.Config(
        batch_size=args.batch_size,
        host_buffer_bytes=0,  # the engine's defaults
        device_buffer_bytes=0,
        device=None if cuda else "cpu",  # None: LOCAL_RANK's GPU
        sources=(
            damacy.Source("image", dtype="bf16" if cuda else "f32"),  # the sample's own image
            damacy.Source("label", label="blobs", dtype="u8"),  # its labels/blobs, the same box
        ),
        augment=damacy.Augment(
            seed=2,
            flip=((0, 0.5), (1, 0.5), (2, 0.5)),  # each axis, half of the time
            rot90=(((1, 2), 0.5),),  # quarter turns in the y-x plane
            mean=MEAN, std=STD, scale=(0.9, 1.1),  # (v - mean) / std, then times 0.9 to 1.1
            intensity_sources=("image",),  # not the label
        ),
    )

    model = UNet3D(CLASSES).to(dev)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    with damacy.Loader(cfg, sampler) as loader:
        for step, batch in zip(range(args.steps), loader):
            x = batch["image"].to(dev).unsqueeze(1).float()  # [n, 1, 32, 32, 32], normalised
            y = batch["label"].to(dev).long()  # [n, 32, 32, 32], flipped and turned as x
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            mean_loss = loss.detach()
            if distributed:
                dist.all_reduce(mean_loss)
                mean_loss /= world
            if rank == 0:
                print(f"step {step}: loss {mean_loss.item():.4f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
