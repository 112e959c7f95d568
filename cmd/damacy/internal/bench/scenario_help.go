package bench

// ScenarioHelp documents the scenario file format (damacy help bench).
const ScenarioHelp = `A scenario file is a JSON object with two sections. Unknown fields are
errors, and every value is checked; a message names the field at fault.

  {
    "name": "throughput",            short name (letters, digits, - _ .)
    "description": "...",            optional free text
    "dataset": {
      "dir": "",                     where the dataset lives; relative to the
                                     scenario file; empty: a directory under
                                     the system temp dir named after the
                                     dataset's parameters (--data overrides)
      "arrays": 16,                  number of OME-NGFF images a000, a001, ...
      "shape": [512, 512, 512],      each image's level-0 shape, rank 2..5
      "chunk": [32, 64, 64],         inner chunk shape
      "shard": [256, 256, 512],      shard shape (a multiple of chunk);
                                     omit for unsharded arrays
      "dtype": "uint16",             a zarr data type, or a list cycled
                                     over the arrays: ["uint8", "uint16"]
      "codec": "zstd",               none, zstd, gzip, lz4, blosc-zstd,
                                     blosc-lz4, blosc-lz4hc, blosc-blosclz,
                                     blosc-zlib; or a list cycled over arrays
      "level": 3,                    the codec's compression level
                                     (0: the codec's default)
      "shuffle": "byte",             blosc only: none, byte (default), bit
      "entropy": 0.5,                fraction of voxels drawn uniformly at
                                     random; the others are 0 (damacy's
                                     generator)
      "values": "zarr_benchmarks",   instead of entropy: the values of the
                                     public zarr benchmark's arrays
                                     (LDeakin/zarr_benchmarks), voxel
                                     (z, y, x) = (x + y^2/32 + z^3) mod
                                     65536; uint16 images of rank 3 only
      "seed": 1,                     data seed: same seed, same bytes
      "labels": {                    optional: an OME-NGFF label image
                                     beside each image, at labels/<name>
        "name": "cells",             the label image's name
        "dtype": "uint8",            an integer zarr data type
        "chunk": [32, 64, 64],       over the image's space axes (the last
        "shard": [256, 256, 512],    2 or 3); omitted: the image's
        "codec": "zstd",             a codec, as dataset.codec
        "level": 3,                  its level (0: the codec's default)
        "foreground": 0.05           the share of voxels in blobs: random
                                     ellipsoids of label values 1, 2, 3
                                     over 0; the image is brighter inside
                                     them; coarser levels, down to about
                                     1 Mi voxels, take every other voxel
      }
    },
    "run": {
      "config": {                    the pipeline's configuration, as
                                     pipeline.DecodeConfig reads it (the
                                     same names as damacy serve's hello;
                                     sizes are bytes or a string with B,
                                     KiB, MiB, GiB, KB, MB, GB); its ranges
                                     are checked when the pipeline starts
        "batch_size": 128,           samples per batch
        "sample_shape": [128,128,128], box extent per axis (chunks: the
                                     grid's chunk shape; may be omitted)
        "dtype": "f32",              output: f32 (the default) or bf16
                                     (with sources: omit it, or give
                                     sources[0]'s)
        "lookahead_batches": 4,      batches planned ahead (2..64); damacy's
                                     lookahead of 512 samples at 128 per
                                     batch is 4
        "n_io_threads": 16,          concurrent readers (0: the default)
        "io_concurrency": 64,        object-store requests in flight when
                                     the dataset is remote (--data s3://...);
                                     0: the default, 64
        "remote_gap_bytes": "256KiB", the largest gap between two chunks
                                     of one object that one GET bridges
                                     (0: the default, 256 KiB)
        "remote_span_bytes": "8MiB", the most one GET spans, gaps
                                     included (0: the default, 8 MiB)
        "max_gpu_memory_bytes": "6GiB", device memory cap; 0: none
        "host_buffer_bytes": "1GiB", staging memory (0: the default)
        "device_buffer_bytes": "1GiB", decoded-chunk memory (0: the
                                     default)
        "chunk_cache_bytes": "256MiB", a chunk cache of this size (decoded
                                     chunks kept across batches; 0: none)
        "mapped_file_bytes": "auto", local files the engine may keep
                                     mapped, to read chunks from in place:
                                     auto (0, the default), off (-1), or a
                                     size
        "batch_slots": 0,            batch slots (0: the default)
        "sources": [                 optional: one tensor per source in
                                     each batch, every one read with the
                                     sample's box (pipeline.Source)
          {"name": "image",          the first is the image the boxes
           "dtype": "bf16"},         are drawn in (f32 or bf16)
          {"name": "label",
           "label": "cells",         dataset.labels' image, its axes
                                     matched to the image's by name
           "dtype": "u8",            f32, bf16, or u8, i32, i64 (labels)
           "host_buffer_bytes": "768MiB",   this source's staging and
           "device_buffer_bytes": "512MiB"} decoded-chunk memory (0: the
                                     run's)
        ],
        "augment": {                 optional: pipeline.Augment, a
                                     transform drawn for every sample as
                                     it is assembled; its axes are
                                     numbers, the box's: the image's axes
                                     in order (here 0 z, 1 y, 2 x; a czyx
                                     image's are 0 c, 1 z, 2 y, 3 x), each
                                     an axis of every source (a label
                                     source has the space axes; one
                                     pipeline per source maps them to its
                                     own)
          "seed": 1,                 the draws' seed
          "flip": [{"axis": 2, "p": 0.5}],
          "rot90": [{"axes": [1, 2], "p": 0.5}],
          "permute": [{"axes": [0, 1, 2], "p": 0.5}],
          "scale": [0.9, 1.1],       intensity, on float sources: drawn
          "offset": [-0.1, 0.1],     from these ranges, after
          "mean": 16384, "std": 21000, normalisation by (v - mean) / std,
          "clip": [-3, 3],           then clipped
          "intensity_sources": ["image"]   the sources it applies to
                                     (omitted: the first)
        }
      },
      "boxes": "random",             random (the default): boxes drawn by
                                     the sampler (run.sampler); chunks:
                                     every chunk once, one box per chunk
                                     of the arrays' chunk grid (the shard
                                     of a sharded array), array after
                                     array, in C order of the grid, as
                                     zarr_benchmarks' read-chunks method
      "batches": 100,                measured batches (chunks: 0 or
                                     omitted for every chunk, the last
                                     batch ragged; else the pass stops
                                     after this many)
      "warmup": 10,                  batches popped before the stats reset
                                     (chunks: the pass's first chunks,
                                     read again by the pass)
      "epochs": 3,                   read the measured batches' boxes this
                                     many times, each epoch after the first
                                     in another order; the report gives
                                     each epoch's rate (0 or 1: once)
      "hold_ms": 0,                  consumer hold between pop and release
      "keep": false,                 the consumer keeps each batch until
                                     the next one is popped, as a training
                                     loop keeps its tensor until its next
                                     step (--keep)
      "engine": "auto",              auto, host, cuda or cuda:N
      "seed": 1,                     box seed: same seed, same boxes
      "sampler": {                   how boxes are drawn (omitted: uniform)
        "kind": "foreground",        uniform, or foreground: a share of
                                     the boxes centred on a voxel of the
                                     label's coarsest level that is not 0
                                     (package sampler), the rest uniform
        "fraction": 0.67             that share (0: 0.5)
      },
      "compare": false               measure the comparisons (--compare):
                                     the same boxes without
                                     run.config.augment, and one pipeline
                                     per source in lockstep
    }
  }

Boxes: each sample's array and its in-bounds origin are drawn uniformly at
random from the box seed, so the same seed reads the same boxes; with the
foreground sampler, the share of boxes centred on foreground is drawn from
the same seed. With run.boxes chunks, the boxes are the chunks, in order.`
