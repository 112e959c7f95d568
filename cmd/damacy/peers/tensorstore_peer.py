#!/usr/bin/env python3
"""Read the boxes of a `damacy bench` run with tensorstore, as a peer.

    damacy bench --boxes-out boxes.json throughput
    python cmd/damacy/peers/tensorstore_peer.py boxes.json [--threads N]
        [--device auto|cuda|cpu] [--data DIR|URI] [--requests N] [--json]

The dataset is the boxes file's dataset_dir (a run on --data s3://...
records that URI there), or --data: a local directory, s3://bucket/path
(tensorstore's s3 kvstore: the endpoint from --s3-endpoint or, as damacy
reads it, DAMACY_S3_ENDPOINT, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL;
the region from AWS_REGION, else us-east-1; credentials from the
environment's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the AWS
default chain, or none with DAMACY_S3_ANONYMOUS=1), gs://bucket/path or
http(s)://host/path. --requests bounds the object-store requests in
flight (default 64, as damacy's io_concurrency).

For each batch, every box is read at once with tensorstore (its thread pool
sized to --threads, all cores by default; no cache), cast to float32 into a
pinned host batch, copied to the GPU with torch and, for bfloat16 output,
cast there; the batch ends with a stream synchronise. Without torch or a GPU
(--device cpu) the batch stays in host memory and bfloat16 is rounded on the
host (to nearest even, NaN kept), so the figure is read + cast only.

Throughput is reported as damacy reports it: output-tensor bytes in the
output dtype / wall time of the measured batches (after the warm-up
batches), plus samples/s and the boxes' bytes in the source dtype / wall.
"""

import argparse
import json
import os
import sys
import time

from importlib.metadata import version

import numpy as np
import tensorstore as ts


def to_bf16_bits(f32):
    """Round float32 to bfloat16 bits (nearest even; NaN -> 0x7FFF)."""
    u = f32.view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    r[np.isnan(f32)] = 0x7FFF
    return r


def first_env(*names):
    for n in names:
        if os.environ.get(n):
            return os.environ[n]
    return ""


def kvstore(base, rel, s3_endpoint):
    """The tensorstore kvstore spec of directory rel below base (a local
    directory or an s3://, gs://, http(s):// URI)."""
    base = base.rstrip("/")
    scheme, sep, rest = base.partition("://")
    if not sep or scheme == "file":
        return {"driver": "file", "path": os.path.join(rest if sep else base, rel)}
    if scheme in ("http", "https"):
        return {"driver": "http", "base_url": base, "path": rel}
    bucket, _, prefix = rest.partition("/")
    path = "/".join(p for p in (prefix, rel) if p) + "/"
    if scheme == "gs":
        return {"driver": "gcs", "bucket": bucket, "path": path}
    if scheme != "s3":
        sys.exit("tensorstore_peer: %s: want a directory or an s3://, gs://, http:// or https:// URI" % base)
    region = os.environ.get("AWS_REGION") or "us-east-1"
    spec = {"driver": "s3", "bucket": bucket, "path": path, "aws_region": region}
    endpoint = s3_endpoint or first_env("DAMACY_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    if endpoint:
        spec["endpoint"] = endpoint
    if os.environ.get("DAMACY_S3_ANONYMOUS", "").lower() in ("1", "true", "yes"):
        spec["aws_credentials"] = {"type": "anonymous"}
    elif os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        spec["aws_credentials"] = {"type": "environment"}
    return spec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("boxes", help="the JSON file `damacy bench --boxes-out` wrote")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="tensorstore IO and copy concurrency")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--data", help="the dataset: a directory or URI (default: the boxes file's dataset_dir)")
    ap.add_argument("--requests", type=int, default=64, help="object-store requests in flight")
    ap.add_argument("--s3-endpoint", help="the S3 endpoint (default: the environment's, as damacy's)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args()

    with open(args.boxes) as f:
        spec = json.load(f)

    torch = None
    if args.device != "cpu":
        try:
            import torch as _torch

            if _torch.cuda.is_available():
                torch = _torch
        except ImportError:
            pass
        if torch is None and args.device == "cuda":
            sys.exit("tensorstore_peer: --device cuda needs torch with a CUDA device")

    ctx = ts.Context(
        {
            "data_copy_concurrency": {"limit": args.threads},
            "file_io_concurrency": {"limit": args.threads},
            "s3_request_concurrency": {"limit": args.requests},
            "gcs_request_concurrency": {"limit": args.requests},
            "http_request_concurrency": {"limit": args.requests},
            "cache_pool": {"total_bytes_limit": 0},
        }
    )
    data = args.data or spec["dataset_dir"]
    arrays = [
        ts.open(
            {"driver": "zarr3", "kvstore": kvstore(data, a if spec.get("plain") else "%s/%d" % (a, spec["level"]), args.s3_endpoint)},
            context=ctx,
            read=True,
        ).result()
        for a in spec["arrays"]
    ]

    n = spec["batch_size"]
    shape = tuple(spec["sample_shape"])
    bf16 = spec["dtype"] == "bfloat16"
    samples = spec["samples"]
    nbatches = spec["warmup"] + spec["batches"]

    if torch is not None:
        pinned = torch.empty((n,) + shape, dtype=torch.float32, pin_memory=True)
        host = pinned.numpy()
        dev_f32 = torch.empty((n,) + shape, dtype=torch.float32, device="cuda")
        dev_out = torch.empty((n,) + shape, dtype=torch.bfloat16, device="cuda") if bf16 else dev_f32
    else:
        host = np.empty((n,) + shape, dtype=np.float32)

    source_bytes = 0
    start = None
    for b in range(nbatches):
        if b == spec["warmup"]:
            if torch is not None:
                torch.cuda.synchronize()
            start = time.perf_counter()
            source_bytes = 0
        batch = samples[b * n : (b + 1) * n]
        futures = [arrays[s["array"]][tuple(slice(lo, hi) for lo, hi in s["box"])].read() for s in batch]
        for i, fut in enumerate(futures):
            a = fut.result()
            source_bytes += a.nbytes
            host[i] = a  # the cast to float32
        if torch is not None:
            dev_f32.copy_(pinned, non_blocking=True)
            if bf16:
                dev_out.copy_(dev_f32)
            torch.cuda.synchronize()
        elif bf16:
            to_bf16_bits(host)
    wall = time.perf_counter() - start

    out_size = 2 if bf16 else 4
    measured = spec["batches"] * n
    output_bytes = measured * int(np.prod(shape)) * out_size
    report = {
        "peer": "tensorstore",
        "tensorstore_version": version("tensorstore"),
        "scenario": spec["scenario"],
        "data": data,
        "threads": args.threads,
        "requests": args.requests,
        "device": "cuda:%d" % torch.cuda.current_device() if torch is not None else "cpu",
        "gpu": torch.cuda.get_device_name() if torch is not None else "",
        "dtype": spec["dtype"],
        "batches": spec["batches"],
        "wall_s": wall,
        "output_gbps": output_bytes / wall / 1e9,
        "samples_per_s": measured / wall,
        "source_gbps": source_bytes / wall / 1e9,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            "tensorstore %s on %s, %d threads, %s: %.3f GB/s of %s output, %.1f samples/s, %.3f GB/s of source bytes (wall %.3f s)"
            % (
                report["tensorstore_version"],
                data,
                args.threads,
                report["device"],
                report["output_gbps"],
                spec["dtype"],
                report["samples_per_s"],
                report["source_gbps"],
                wall,
            )
        )


if __name__ == "__main__":
    main()
