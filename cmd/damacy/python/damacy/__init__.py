"""High-speed streamed assembly of tensors from zarr sources to GPU.

damacy reads boxes out of sharded zarr / OME-NGFF stores and assembles each
batch as one contiguous float32 or bfloat16 tensor, on the GPU (or in host
memory), handed over as DLPack. The work runs in a ``damacy serve`` process
that each :class:`Pipeline` starts; this package is its pure-Python client.

Quick start::

    import math

    import damacy
    import torch

    cfg = damacy.Config(
        batch_size=8,
        host_buffer_bytes=1 << 30,
        device_buffer_bytes=1 << 30,
        dtype="bf16",
    )
    samples = [
        damacy.Sample(uri="/data/cells/cell-1.zarr", aabb=[(0, 64), (0, 256), (0, 256)]),
        damacy.Sample(uri="/data/cells/cell-2.zarr", aabb=[(0, 64), (0, 256), (0, 256)]),
    ]

    with damacy.Pipeline(cfg) as d:
        d.push(samples)
        d.flush()  # no more samples: the last batch may be short
        for batch in d.batches(math.ceil(len(samples) / cfg.batch_size)):
            with batch as t:
                x = torch.from_dlpack(t)
                ...  # train step
"""

from ._augment import Augment, Transform
from ._batch import Batch, BatchInfo, Skipped, Tensor
from ._config import Config, Source
from ._enums import Dtype, Status
from ._errors import (
    BudgetExceeded,
    DamacyError,
    DecodeError,
    DtypeMismatch,
    InvalidArgument,
    NativeCudaError,
    NotFound,
    OutOfMemory,
    RankMismatch,
    ShutdownError,
    StorageError,
    TryAgain,
)
from ._loader import Loader
from ._log import set_log_level
from ._pipeline import Pipeline
from ._sample import Sample
from ._sampler import Draw, ForegroundSampler, GridSampler, Sampler, SamplerArray, UniformSampler
from ._stats import Metric, Stats
from ._version import __version__

__all__ = [
    "Pipeline",
    "Config",
    "Sample",
    "Sampler",
    "UniformSampler",
    "ForegroundSampler",
    "GridSampler",
    "SamplerArray",
    "Draw",
    "Loader",
    "Batch",
    "BatchInfo",
    "Skipped",
    "Source",
    "Tensor",
    "Augment",
    "Transform",
    "Metric",
    "Stats",
    "Dtype",
    "Status",
    "DamacyError",
    "TryAgain",
    "InvalidArgument",
    "NotFound",
    "DtypeMismatch",
    "RankMismatch",
    "StorageError",
    "DecodeError",
    "NativeCudaError",
    "OutOfMemory",
    "BudgetExceeded",
    "ShutdownError",
    "set_log_level",
    "__version__",
]
