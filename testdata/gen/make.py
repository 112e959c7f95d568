"""Write the stores of testdata/ with zarr-python, numcodecs and tensorstore,
and their expected contents.

usage: python testdata/gen/make.py [--out DIR] [--seed N] [--any-version]

Without --out the committed set is rewritten: testdata/ (this script's
parent's parent) with seed 1, after checking that the tools are the
versions pinned in .ci/requirements.txt (--any-version skips the check);
only the directories and files this script writes are removed first. With
--out DIR (and usually a fresh --seed) the same stores are written on other
random data into DIR: the zarr package's TestCrosscheckPython does that on
every run.

Every store's data comes from a generator seeded with (seed, CRC-32 of the
store's name), so adding a store leaves the others' bytes alone. Each array
is read back with the library that wrote it, and the script fails unless
that equals what was meant to be stored, bit for bit (NaN payloads
included); expected/NAME.npy is then that content, little-endian and in C
order, and manifest.json lists every array (see ../README.md).
"""

import argparse
import gzip
import importlib.metadata
import json
import os
import shutil
import struct
import types
import warnings
import zlib

import numpy as np
import numcodecs
import tensorstore as ts
import zarr
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                         TransposeCodec, ZstdCodec)
from zarr.codecs import LZ4 as NumcodecsLZ4

# zarr-python warns that numcodecs.* codecs in zarr v3 are not yet
# specified; writing one is the point here.
warnings.filterwarnings("ignore", module="zarr")
warnings.filterwarnings("ignore", message=".*numcodecs.*")

# numcodecs' GZip stamps the current time into every gzip header; stamp 0
# ("no time") so that the files are the same on every run.
gzip.time = types.SimpleNamespace(time=lambda: 0)

HERE = os.path.dirname(os.path.abspath(__file__))
COMMITTED = os.path.dirname(HERE)
# What the committed stores are written with (.ci/requirements.txt).
PINNED = {"zarr": "3.1.6", "numcodecs": "0.16.6", "tensorstore": "0.1.85", "numpy": "2.4.6"}
# What the script writes into OUT (and removes first in the committed set).
OUTPUTS = ["zarr-python", "tensorstore", "ngff", "expected", "manifest.json"]

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]

OUT = None
SEED = None
MANIFEST = []
NOSYNC = ts.Context({"file_io_sync": False})


def version(pkg):
    return importlib.metadata.version(pkg)


def zp_writer():
    return "zarr-python %s, numcodecs %s" % (version("zarr"), version("numcodecs"))


def ts_writer():
    return "tensorstore %s" % version("tensorstore")


def rng_for(name):
    return np.random.default_rng([SEED, zlib.crc32(name.encode())])


def random_data(rng, dtype, shape):
    """Random values of dtype, never all zero: for integers a random walk
    (compressible) with one element in 32 drawn from the whole range;
    for floats normal values with NaNs (quiet, with payloads and both
    signs), infinities, -0 and subnormals at random places."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "b":
        a = rng.random(n) < 0.4
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        span = int(info.max) - int(info.min)
        walk = np.cumsum(rng.integers(-3, 4, n)) + int(rng.integers(0, span // 2 + 1)) + int(info.min) // 2
        a = np.clip(walk, int(info.min), int(info.max)).astype(dt)
        wide = rng.random(n) < 1 / 32
        a[wide] = rng.integers(info.min, info.max, int(wide.sum()), dtype=dt, endpoint=True)
        a[int(rng.integers(0, n))] = info.max
        a[int(rng.integers(0, n))] = info.min
    else:
        a = (rng.standard_normal(n) * 1000).astype(dt)
        bits = a.view("u%d" % dt.itemsize)
        special = {2: [0x7E01, 0xFE7F, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x83FF],
                   4: [0x7FC00001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x807FFFFF],
                   8: [0x7FF8000000000001, 0xFFF8123456789ABC, 0x7FF0000000000000, 0xFFF0000000000000,
                       0x8000000000000000, 0x0000000000000001, 0x800FFFFFFFFFFFFF]}[dt.itemsize]
        for v in special:
            bits[int(rng.integers(0, n))] = v
    if not a.any():
        a[0] = 1
    return a.reshape(shape)


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and a.tobytes() == b.tobytes()


def le(a):
    """a as little-endian, C order."""
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")))


def fill_bytes(dtype, fill):
    dt = np.dtype(dtype).newbyteorder("<")
    if isinstance(fill, str) and fill.startswith("0x"):
        return int(fill, 16).to_bytes(dt.itemsize, "little")
    if fill is None:
        return bytes(dt.itemsize)
    return np.array(fill, dtype=dt).tobytes()


def blank(data, fill_b, regions):
    """Set each region (a tuple of slices) of data to the fill value's bits."""
    fv = np.frombuffer(fill_b, dtype=data.dtype.newbyteorder("<"))[0]
    for r in regions:
        data[r] = fv
    return data


def dtname(dtype):
    """The zarr v3 name of a numpy dtype, whatever its byte order."""
    return np.dtype(dtype).newbyteorder("=").name


def record(name, path, expected, dtype, fill_b, writer, exercises, ngff_level=None, npy=None, **extra):
    """Add an array to the manifest; expected is saved as expected/NAME.npy
    unless npy names a file already saved (the NGFF twins share theirs)."""
    if npy is None:
        npy = "expected/%s.npy" % name
        os.makedirs(os.path.dirname(os.path.join(OUT, npy)), exist_ok=True)
        np.save(os.path.join(OUT, npy), le(expected))
    e = dict(name=name, path=path, ngff_level=ngff_level, npy=npy, dtype=dtname(dtype),
             shape=list(expected.shape), fill_le_hex=fill_b.hex(), writer=writer, exercises=exercises)
    e.update(extra)
    MANIFEST.append(e)


def check(name, got, want):
    if not same_bits(le(got), le(want)):
        raise SystemExit("%s: the writer reads back other bits than it was given" % name)


def zp_array(name, dtype, shape, exercises, chunks, fill=0, blanks=(), delete=(), **kw):
    """Write random data with zarr-python at zarr-python/NAME.zarr; blanks
    are regions set to the fill value (left unwritten as empty chunks),
    delete maps chunk keys to remove to the region each held."""
    full_name = "zarr-python/" + name
    data = random_data(rng_for(full_name), np.dtype(dtype).newbyteorder("="), shape)
    path = full_name + ".zarr"
    full = os.path.join(OUT, path)
    a = zarr.create_array(full, shape=data.shape, dtype=dtype, chunks=chunks, fill_value=fill,
                          config={"write_empty_chunks": False}, **kw)
    fb = fill_bytes(dtype, fill)
    data = blank(data, fb, blanks)
    for region in dict(delete).values():
        # A chunk left all fill is never written (write_empty_chunks is
        # off), so there would be no file to delete: keep one value off it.
        view = data[region]
        fv = np.frombuffer(fb, dtype=data.dtype.newbyteorder("<"))[0]
        if np.all(view == fv):
            view.flat[0] = fv + 1
    a[...] = data
    for key in delete:
        os.remove(os.path.join(full, key))
        blank(data, fb, [delete[key]])
    got = a[...]
    check(name, got, data)
    record(full_name, path, got, dtype, fb, zp_writer(), exercises)
    return full


def main():
    global OUT, SEED
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory to write (default: the committed testdata/)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--any-version", action="store_true", help="write the committed set with other tool versions")
    args = ap.parse_args()
    OUT, SEED = os.path.abspath(args.out or COMMITTED), args.seed
    if OUT == COMMITTED:
        wrong = ["%s %s (pinned %s)" % (p, version(p), v) for p, v in PINNED.items() if version(p) != v]
        if wrong and not args.any_version:
            raise SystemExit("not the pinned versions: %s; install .ci/requirements.txt or pass --any-version"
                             % ", ".join(wrong))
        for o in OUTPUTS:
            p = os.path.join(OUT, o)
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.remove(p)
    os.makedirs(OUT, exist_ok=True)
    zarr_python_v3()
    zarr_python_v2()
    tensorstore_arrays()
    ngff_image_labels()
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1)
        f.write("\n")
    print("wrote %d arrays (%s, %s, numpy %s), seed %d" % (len(MANIFEST), zp_writer(), ts_writer(),
                                                            version("numpy"), SEED))


def zarr_python_v3():
    # Every data type, default codecs (bytes + zstd), partial edge chunks,
    # a blank chunk left unwritten.
    for dt in DTYPES:
        zp_array("v3-%s" % dt, dt, (7, 9), "v3 %s, default codecs (bytes little, zstd), edge chunks, missing chunk" % dt,
                 (3, 4), blanks=[(slice(3, 6), slice(4, 8))])

    # Big-endian bytes codec.
    for dt in ["int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]:
        zp_array("v3-big-%s" % dt, dt, (5, 6), "v3 bytes endian big, %s, zstd" % dt, (3, 4),
                 serializer=BytesCodec(endian="big"))

    # Codecs.
    shape, chunks = (5, 7, 6), (3, 4, 4)
    zp_array("v3-zstd-checksum", "int16", shape, "zstd level 3 with checksum", chunks,
             compressors=[ZstdCodec(level=3, checksum=True)])
    zp_array("v3-zstd-nochecksum", "int16", shape, "zstd level -3 without checksum", chunks,
             compressors=[ZstdCodec(level=-3, checksum=False)])
    zp_array("v3-gzip", "int16", shape, "gzip level 6", chunks, compressors=[GzipCodec(level=6)])
    zp_array("v3-zstd-crc32c", "int16", shape, "zstd then crc32c", chunks, compressors=[ZstdCodec(level=1), Crc32cCodec()])
    zp_array("v3-crc32c", "int16", shape, "crc32c without compression", chunks, compressors=[Crc32cCodec()])
    zp_array("v3-none", "int16", shape, "bytes only, no compression", chunks, compressors=None)
    zp_array("v3-numcodecs-lz4", "int16", shape, "numcodecs.lz4 in zarr v3", chunks,
             compressors=[NumcodecsLZ4(acceleration=1)])
    zp_array("v3-transpose", "int16", shape, "transpose [2,0,1], then bytes and zstd", chunks,
             filters=[TransposeCodec(order=(2, 0, 1))])
    zp_array("v3-transpose-big", "float32", (5, 9, 6), "transpose [1,2,0], bytes big, zstd", (3, 4, 5),
             filters=[TransposeCodec(order=(1, 2, 0))], serializer=BytesCodec(endian="big"))

    # Blosc: every inner codec with every shuffle; the bitshuffled arrays
    # get 256-byte blocks (several per chunk). The manifest says what the
    # chunks' headers hold: c-blosc splits blocks into streams for every
    # codec but zstd, when a block holds 128 elements or more, and then
    # enlarges the blocks, so here split chunks have one block.
    for cname in ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]:
        for shuffle, dt in [("noshuffle", "int32"), ("shuffle", "uint16"), ("bitshuffle", "float64")]:
            bs = 256 if shuffle == "bitshuffle" else 0
            p = zp_array("v3-blosc-%s-%s" % (cname, shuffle), dt, (24, 20),
                         "blosc %s %s %s, blocksize %s" % (cname, shuffle, dt, bs or "auto"), (16, 16),
                         compressors=[BloscCodec(cname=cname, clevel=5, shuffle=shuffle,
                                                 typesize=np.dtype(dt).itemsize, blocksize=bs)])
            note_blosc(p)
    p = zp_array("v3-blosc-memcpy", "uint8", (7, 7), "blosc lz4 shuffle of 16-byte chunks", (4, 4),
                 compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=1)])
    note_blosc(p)

    # Chunk key encodings.
    zp_array("v3-keys-v2-dot", "int16", shape, "chunk_key_encoding v2 '.'", chunks,
             chunk_key_encoding={"name": "v2", "separator": "."})
    zp_array("v3-keys-v2-slash", "int16", shape, "chunk_key_encoding v2 '/'", chunks,
             chunk_key_encoding={"name": "v2", "separator": "/"})
    zp_array("v3-keys-default-dot", "int16", shape, "chunk_key_encoding default '.'", chunks,
             chunk_key_encoding={"name": "default", "separator": "."})

    # Sharding: index at the end and at the start, empty inner chunks, a
    # shard that is all fill (not written), nested sharding, a deleted shard.
    zp_array("v3-shard-end", "uint16", (12, 10), "sharding, index at end, an empty inner chunk", (6, 10),
             compressors=None, serializer=ShardingCodec(chunk_shape=(3, 5), codecs=[BytesCodec(), ZstdCodec()]),
             blanks=[(slice(0, 3), slice(0, 5))])
    zp_array("v3-shard-start", "float32", (12, 16), "sharding, index at start, a shard of fill only (not written)",
             (6, 8), compressors=None,
             serializer=ShardingCodec(chunk_shape=(3, 4), codecs=[BytesCodec(), ZstdCodec()], index_location="start"),
             blanks=[(slice(6, 12), slice(8, 16))])
    zp_array("v3-shard-partial", "int32", (13, 11), "partial edge shards; inner bytes big, gzip, crc32c", (10, 10),
             compressors=None, serializer=ShardingCodec(chunk_shape=(5, 5), codecs=[
                 BytesCodec(endian="big"), GzipCodec(level=1), Crc32cCodec()]))
    zp_array("v3-shard-nested", "int16", (16, 16), "nested sharding (outer index at start, inner at end)", (8, 8),
             compressors=None, serializer=ShardingCodec(chunk_shape=(4, 4), index_location="start", codecs=[
                 ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec()])]))
    zp_array("v3-shard-blosc", "uint16", (16, 20), "sharding with blosc lz4 bitshuffle inner chunks", (8, 10),
             compressors=None, serializer=ShardingCodec(chunk_shape=(4, 5), codecs=[
                 BytesCodec(), BloscCodec(cname="lz4", shuffle="bitshuffle", typesize=2)]))
    zp_array("v3-shard-deleted", "uint8", (12, 12), "sharding, a shard file deleted", (6, 6),
             compressors=None, serializer=ShardingCodec(chunk_shape=(3, 3), codecs=[BytesCodec(), ZstdCodec()]),
             delete={"c/1/0": (slice(6, 12), slice(0, 6))})
    zp_array("v3-shard-then-zstd", "uint32", (12, 10),
             "sharding followed by a zstd of the whole shard (zarr-python's default compressors)", (6, 10),
             serializer=ShardingCodec(chunk_shape=(3, 5), codecs=[BytesCodec(), ZstdCodec()]))
    zp_array("v3-deleted-chunk", "int64", (7, 9), "a chunk file deleted", (4, 4),
             delete={"c/0/1": (slice(0, 4), slice(4, 8))})

    # Fill values. Shapes avoid one-element edge chunks: one holding a NaN
    # with a payload would equal a NaN fill, go unwritten, and read back as
    # the fill's bits (zarr-python compares NaNs as equal when it skips
    # empty chunks).
    zp_array("v3-fill-nan", "float32", (9, 10), "fill \"NaN\", a missing chunk", (4, 4), fill=float("nan"),
             blanks=[(slice(0, 4), slice(4, 8))])
    zp_array("v3-fill-inf", "float64", (9, 6), "fill \"Infinity\", a missing chunk", (4, 4), fill=float("inf"),
             blanks=[(slice(4, 8), slice(0, 4))])
    zp_array("v3-fill-neginf", "float16", (9, 6), "fill \"-Infinity\", a missing edge chunk", (4, 4),
             fill=float("-inf"), blanks=[(slice(8, 9), slice(0, 4))])
    zp_array("v3-fill-int", "int16", (9, 6), "fill -1234, a missing chunk", (4, 4), fill=-1234,
             blanks=[(slice(4, 8), slice(0, 4))])
    zp_array("v3-fill-bool", "bool", (9, 6), "fill true, a missing chunk", (4, 4), fill=True,
             blanks=[(slice(0, 4), slice(0, 4))])
    zp_array("v3-fill-uint64", "uint64", (9, 6), "fill 2^64-1, a missing chunk", (4, 4), fill=2**64 - 1,
             blanks=[(slice(0, 4), slice(0, 4))])
    hex_fill_array("v3-fill-hex-nan", "float32", "0x7fc0abcd", float("nan"), "a NaN with a payload")
    hex_fill_array("v3-fill-hex", "float64", "0xc004000000000000", -2.5, "-2.5")

    # 1-D and 4-D arrays.
    zp_array("v3-1d", "uint32", (37,), "1-D", (8,))
    zp_array("v3-4d", "float32", (3, 4, 5, 6), "4-D", (2, 3, 3, 4))


def note_blosc(store):
    """Append to the last manifest entry what the blosc headers of the
    chunks of store say: blocks per chunk, split streams, memcpyed chunks."""
    blocks, split, memcpyed, n = set(), set(), 0, 0
    for root, _, files in os.walk(store):
        for f in files:
            if f in ("zarr.json", ".zarray", ".zattrs", ".zgroup"):
                continue
            with open(os.path.join(root, f), "rb") as fh:
                b = fh.read(16)
            flags = b[2]
            nbytes, blocksize = struct.unpack("<ii", b[4:12])
            n += 1
            if flags & 0x02:
                memcpyed += 1
                continue
            blocks.add(-(-nbytes // blocksize))
            split.add(not flags & 0x10)
    parts = []
    if blocks:
        parts.append("%s block%s per chunk" % ("/".join(map(str, sorted(blocks))), "" if blocks == {1} else "s"))
        parts.append({frozenset([True]): "streams split", frozenset([False]): "streams not split"}.get(
            frozenset(split), "streams split in some chunks"))
    if memcpyed:
        parts.append("%d of %d chunks memcpyed (stored uncompressed)" % (memcpyed, n))
    MANIFEST[-1]["exercises"] += " (%s)" % ", ".join(parts)


def hex_fill_array(name, dtype, hex_fill, fill, what):
    """An array whose fill value is written as a hex bit pattern (zarr-python
    writes numbers, "NaN" for any NaN: the metadata is edited), with its
    second row of chunks missing."""
    full_name = "zarr-python/" + name
    d = random_data(rng_for(full_name), dtype, (8, 8))
    path = full_name + ".zarr"
    full = os.path.join(OUT, path)
    a = zarr.create_array(full, shape=d.shape, dtype=dtype, chunks=(4, 4), fill_value=fill,
                          config={"write_empty_chunks": False})
    a[...] = d
    shutil.rmtree(os.path.join(full, "c", "1"))  # chunks (1, 0) and (1, 1)
    meta_path = os.path.join(full, "zarr.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["fill_value"] = hex_fill
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=2)
    fb = fill_bytes(dtype, hex_fill)
    want = blank(d.copy(), fb, [(slice(4, 8), slice(0, 8))])
    got = zarr.open_array(full, mode="r")[...]
    # The expected values are what the metadata means; the manifest says
    # where zarr-python reads otherwise.
    note = "" if same_bits(got, want) else " (zarr-python reads the missing chunks as another NaN)"
    record(full_name, path, want, dtype, fb, zp_writer() + ", fill_value edited",
           "fill_value \"%s\" (%s), missing chunks%s" % (hex_fill, what, note))


def zarr_python_v2():
    for dt in ["bool", "int8", "uint8", "<i2", ">i2", "<u2", "<i4", ">i4", "<u4", ">u4", "<i8", ">u8",
               "<f2", ">f2", "<f4", ">f4", "<f8", ">f8"]:
        name = "v2-%s" % dt.replace("<", "le-").replace(">", "be-")
        zp_array(name, dt, (8, 7), "v2 %s, zstd, edge chunks, a missing chunk" % dt, (4, 3), zarr_format=2,
                 compressors=numcodecs.Zstd(level=1), blanks=[(slice(4, 8), slice(3, 6))])
    for comp, what in [(numcodecs.GZip(level=5), "gzip"), (numcodecs.Zlib(level=3), "zlib"),
                       (numcodecs.LZ4(acceleration=1), "lz4"), (None, "none"),
                       (numcodecs.Zstd(level=5, checksum=True), "zstd-checksum"),
                       (numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1), "blosc-lz4-shuffle"),
                       (numcodecs.Blosc(cname="lz4hc", clevel=5, shuffle=1, blocksize=128), "blosc-lz4hc-shuffle"),
                       (numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2), "blosc-zstd-bitshuffle"),
                       (numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=0), "blosc-blosclz-noshuffle"),
                       (numcodecs.Blosc(cname="zlib", clevel=1, shuffle=-1), "blosc-zlib-autoshuffle")]:
        p = zp_array("v2-%s" % what, "int32", (12, 20), "v2 compressor %s" % what, (8, 16), zarr_format=2,
                     compressors=comp)
        if what.startswith("blosc"):
            note_blosc(p)
    zp_array("v2-order-F", "<f4", (5, 6, 4), "v2 order F, zstd", (3, 4, 3), zarr_format=2, order="F",
             compressors=numcodecs.Zstd(level=1))
    note_blosc(zp_array("v2-order-F-big-lz4", ">u2", (9, 10, 8), "v2 order F, big-endian, blosc lz4 shuffle",
                        (6, 8, 4), zarr_format=2, order="F", compressors=numcodecs.Blosc(cname="lz4", shuffle=1)))
    note_blosc(zp_array("v2-order-F-big-blosclz", ">i2", (9, 10, 8), "v2 order F, big-endian, blosc blosclz bitshuffle",
                        (6, 8, 4), zarr_format=2, order="F",
                        compressors=numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=2)))
    zp_array("v2-slash", "int16", (9, 9), "v2 dimension_separator '/'", (4, 4), zarr_format=2,
             chunk_key_encoding={"name": "v2", "separator": "/"}, compressors=numcodecs.Zstd(level=1))
    zp_array("v2-fill-null", "uint16", (9, 9), "v2 fill_value null, a missing chunk", (4, 4), zarr_format=2,
             fill=None, delete={"1.1": (slice(4, 8), slice(4, 8))})
    zp_array("v2-fill-nan", "<f8", (9, 10), "v2 fill NaN, a missing chunk", (4, 4), zarr_format=2,
             fill=float("nan"), blanks=[(slice(0, 4), slice(0, 4))])
    zp_array("v2-fill-neginf", "<f4", (9, 6), "v2 fill -Infinity, a missing chunk", (4, 4), zarr_format=2,
             fill=float("-inf"), blanks=[(slice(0, 4), slice(0, 4))])
    # Outside the formats damacy reads: the reader must refuse it, naming
    # the filter.
    zp_array("v2-filter-delta", "<i4", (6, 6), "v2 numcodecs delta filter (unsupported: must fail naming it)",
                 (4, 4), zarr_format=2, filters=[numcodecs.Delta(dtype="<i4")], compressors=numcodecs.Zstd(level=1))
    MANIFEST[-1]["error"] = 'filters[0]: unsupported codec "delta"'


def tensorstore_arrays():
    """Arrays written by tensorstore: sharded v3 (crc32c shard indexes),
    blosc snappy (which numcodecs lacks), transpose + crc32c, v2 key
    encoding, and zarr v2 through its zarr driver."""

    def bytes_le():
        return {"name": "bytes", "configuration": {"endian": "little"}}

    def index():
        return [bytes_le(), {"name": "crc32c"}]

    def shard(inner, codecs, at="end"):
        return {"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": codecs, "index_codecs": index(), "index_location": at}}

    def blosc(cname, shuffle, typesize, blocksize=0):
        return {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle,
                                                   "typesize": typesize, "blocksize": blocksize}}

    zstd = {"name": "zstd", "configuration": {"level": 3}}
    v3 = [
        # name, dtype, shape, chunk, codecs, what, rows written (None: all), extra metadata
        ("v3-shard-zstd", "float32", (20, 20), (16, 16), [shard([8, 8], [bytes_le(), zstd])],
         "sharded, zstd, shards of the unwritten rows missing", 16, {}),
        ("v3-shard-blosc-lz4", "uint16", (20, 18), (16, 16), [shard([8, 8], [bytes_le(), blosc("lz4", "shuffle", 2)])],
         "sharded, blosc lz4 shuffle inner chunks", None, {}),
        ("v3-shard-blosc-zstd-start", "float32", (18, 18), (16, 16),
         [shard([8, 8], [bytes_le(), blosc("zstd", "bitshuffle", 4)], "start")],
         "sharded, blosc zstd bitshuffle, index at start", None, {}),
        ("v3-shard-nested", "int16", (16, 16), (8, 8),
         [shard([4, 4], [shard([2, 2], [bytes_le(), zstd])], "start")],
         "nested sharding (outer index at start)", None, {}),
        ("v3-transpose-gzip-crc32c", "int32", (9, 11), (4, 4),
         [{"name": "transpose", "configuration": {"order": [1, 0]}},
          {"name": "bytes", "configuration": {"endian": "big"}},
          {"name": "gzip", "configuration": {"level": 5}}, {"name": "crc32c"}],
         "transpose [1,0], bytes big, gzip, crc32c", None, {}),
        ("v3-blosc-snappy-shuffle", "int32", (20, 24), (16, 16), [bytes_le(), blosc("snappy", "shuffle", 4, 256)],
         "blosc snappy shuffle, 256-byte blocks", None, {}),
        ("v3-blosc-snappy-bitshuffle", "uint16", (20, 24), (16, 16), [bytes_le(), blosc("snappy", "bitshuffle", 2)],
         "blosc snappy bitshuffle", None, {}),
        ("v3-blosc-snappy-noshuffle", "uint32", (20, 24), (16, 16), [bytes_le(), blosc("snappy", "noshuffle", 4)],
         "blosc snappy noshuffle", None, {}),
        ("v3-keys-v2", "uint8", (9, 10), (4, 4), [bytes_le(), zstd], "chunk_key_encoding v2 '.'", None,
         {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}}),
    ]
    for name, dt, shape, chunk, codecs, what, rows, extra in v3:
        full_name = "tensorstore/" + name
        d = random_data(rng_for(full_name), dt, shape)
        path = full_name + ".zarr"
        meta = {"shape": list(shape), "data_type": dt, "fill_value": 7, "codecs": codecs,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}}}
        meta.update(extra)
        arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(OUT, path)},
                       "metadata": meta}, create=True, delete_existing=True, context=NOSYNC).result()
        want = d.copy()
        if rows is None:
            arr.write(d).result()
        else:
            arr[:rows].write(d[:rows]).result()
            want[rows:] = 7
        got = arr.read().result()
        check(name, got, want)
        record(full_name, path, got, dt, fill_bytes(dt, 7), ts_writer(), what)
        if "blosc-snappy" in name:
            note_blosc(os.path.join(OUT, path))

    v2 = [
        ("v2-zstd", "<i2", (9, 8), (4, 4), "C", {"id": "zstd", "level": 3}, ".", 0, "v2 zstd"),
        ("v2-blosc-F", "<f4", (7, 9), (4, 4), "F", {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
         ".", 0, "v2 order F, blosc lz4 shuffle"),
        ("v2-zlib-big", ">u4", (9, 8), (4, 4), "C", {"id": "zlib", "level": 4}, ".", 0, "v2 big-endian, zlib"),
        ("v2-gzip-slash-nan", "<f8", (8, 9), (4, 4), "C", {"id": "gzip", "level": 6}, "/", "NaN",
         "v2 gzip, dimension_separator '/', fill NaN, unwritten rows missing"),
        ("v2-none-F-big", ">i8", (6, 7), (4, 4), "F", None, ".", -3, "v2 no compressor, order F, big-endian"),
    ]
    for name, dt, shape, chunk, order, comp, sep, fill, what in v2:
        full_name = "tensorstore/" + name
        d = random_data(rng_for(full_name), np.dtype(dt).newbyteorder("="), shape)
        path = full_name + ".zarr"
        meta = {"shape": list(shape), "chunks": list(chunk), "dtype": dt, "order": order, "compressor": comp,
                "fill_value": fill, "filters": None, "dimension_separator": sep}
        arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": os.path.join(OUT, path)},
                       "metadata": meta}, create=True, delete_existing=True, context=NOSYNC).result()
        fv = float("nan") if fill == "NaN" else fill
        want = d.copy()
        if fill == "NaN":
            arr[:4].write(d[:4]).result()
            want[4:] = np.nan
        else:
            arr.write(d).result()
        got = arr.read().result()
        check(name, got, want)
        record(full_name, path, got, dt, fill_bytes(dt, fv), ts_writer(), what)


# --- OME-NGFF: an image with labels, as 0.5 over zarr v3 and as 0.4 over
# zarr v2, holding the same values.

NGFF_LEVELS = 3
IMAGE_SHAPE = (2, 8, 20, 18)  # c, z, y, x
LABELS = {"cells": "uint32", "nuclei": "uint8"}


def space_axes(names):
    kinds = {"c": ("channel", None), "z": ("space", "micrometer"), "y": ("space", "micrometer"),
             "x": ("space", "micrometer")}
    out = []
    for n in names:
        ax = {"name": n, "type": kinds[n][0]}
        if kinds[n][1]:
            ax["unit"] = kinds[n][1]
        out.append(ax)
    return out


def downsample(d, spatial_from):
    """Level k+1 of level d: every second voxel along the spatial axes
    (those from index spatial_from on), starting at 0."""
    idx = tuple(slice(None) if k < spatial_from else slice(None, None, 2) for k in range(d.ndim))
    return np.ascontiguousarray(d[idx])


def pyramid(d, spatial_from):
    out = [d]
    for _ in range(NGFF_LEVELS - 1):
        out.append(downsample(out[-1], spatial_from))
    return out


def ngff_multiscale(name, names, version=None):
    """multiscales[0]: levels "0", "1", ... with scale 2^k on z, y, x (z
    voxels 2 um, y and x 0.5 um at level 0) and the same translation (the
    origin) at every level: voxel i of level k is voxel i*2^k of level 0."""
    base = {"c": 1.0, "z": 2.0, "y": 0.5, "x": 0.5}
    origin = {"c": 0.0, "z": 10.0, "y": -4.0, "x": 3.5}
    ms = {"name": name, "axes": space_axes(names), "type": "nearest", "datasets": []}
    if version:
        ms["version"] = version
    for k in range(NGFF_LEVELS):
        scale = [base[n] * (2 ** k if n != "c" else 1) for n in names]
        trans = [origin[n] for n in names]
        ms["datasets"].append({"path": str(k), "coordinateTransformations": [
            {"type": "scale", "scale": scale}, {"type": "translation", "translation": trans}]})
    return ms


def label_values(rng, dtype, shape):
    """A label volume: background 0 with random boxes of random ids (for
    uint32 some above 2^16 and 2^24, so float32 rounds them), later boxes
    over earlier ones."""
    d = np.zeros(shape, dtype=dtype)
    info = np.iinfo(dtype)
    for i in range(14):
        lo = [int(rng.integers(0, n)) for n in shape]
        hi = [min(n, a + int(rng.integers(2, max(3, n // 2)))) for a, n in zip(lo, shape)]
        if dtype == "uint8":
            v = int(rng.integers(1, info.max, endpoint=True))
        else:
            v = int(rng.choice([rng.integers(1, 1 << 16), rng.integers(1 << 16, 1 << 24),
                                rng.integers(1 << 24, info.max, endpoint=True)]))
        d[tuple(slice(a, b) for a, b in zip(lo, hi))] = v
    d[0, 0, 0] = info.max
    return d


def image_label_meta(name, values, version=None):
    present = sorted(int(v) for v in np.unique(values) if v)
    colors = [{"label-value": v, "rgba": [(v * 37) % 256, (v * 91) % 256, (v * 53) % 256, 255]} for v in present[:4]]
    props = [{"label-value": v, "class": name} for v in present[:4]]
    meta = {"colors": colors, "properties": props, "source": {"image": "../../"}}
    if version:
        meta = {"version": version, **meta}
    return meta


def ngff_image_labels():
    image = random_data(rng_for("ngff/image"), "uint16", IMAGE_SHAPE)
    images = pyramid(image, 1)
    labels = {n: pyramid(label_values(rng_for("ngff/" + n), dt, IMAGE_SHAPE[1:]), 0) for n, dt in LABELS.items()}
    npys = {}
    for k in range(NGFF_LEVELS):
        for what, lv in [("image", images[k])] + [(n, labels[n][k]) for n in LABELS]:
            npy = "expected/ngff/%s-%d.npy" % (what, k)
            os.makedirs(os.path.join(OUT, "expected", "ngff"), exist_ok=True)
            np.save(os.path.join(OUT, npy), le(lv))
            npys[what, k] = npy
    writer = zp_writer() + ", OME-NGFF metadata by hand"

    # 0.5 over zarr v3: sharded image levels, unsharded labels.
    top = "ngff/image_labels_v05.zarr"
    g = zarr.open_group(os.path.join(OUT, top), mode="w", zarr_format=3)
    for k, lv in enumerate(images):
        a = g.create_array(str(k), shape=lv.shape, dtype="uint16", chunks=(1, 4, 8, 8), shards=(1, 8, 16, 16),
                           dimension_names=["c", "z", "y", "x"], fill_value=0,
                           compressors=[BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", typesize=2)],
                           config={"write_empty_chunks": False})
        a[...] = lv
        check("%s level %d" % (top, k), a[...], lv)
    g.attrs.update({"ome": {"version": "0.5", "multiscales": [ngff_multiscale("image", ["c", "z", "y", "x"])]}})
    lg = g.create_group("labels")
    lg.attrs.update({"ome": {"version": "0.5", "labels": list(LABELS)}})
    for name, dt in LABELS.items():
        one = lg.create_group(name)
        for k, lv in enumerate(labels[name]):
            comp = [ZstdCodec(level=5)] if dt == "uint32" else [GzipCodec(level=6)]
            a = one.create_array(str(k), shape=lv.shape, dtype=dt, chunks=(4, 8, 8), dimension_names=["z", "y", "x"],
                                 fill_value=0, compressors=comp, config={"write_empty_chunks": False})
            a[...] = lv
            check("%s label %s level %d" % (top, name, k), a[...], lv)
        one.attrs.update({"ome": {"version": "0.5", "multiscales": [ngff_multiscale(name, ["z", "y", "x"])],
                                  "image-label": image_label_meta(name, labels[name][0])}})

    # 0.4 over zarr v2, '/' chunk keys (as 0.4 requires).
    twin = "ngff/image_labels_v04.zarr"
    g = zarr.open_group(os.path.join(OUT, twin), mode="w", zarr_format=2)
    slash = {"name": "v2", "separator": "/"}
    for k, lv in enumerate(images):
        a = g.create_array(str(k), shape=lv.shape, dtype="<u2", chunks=(1, 4, 8, 8), chunk_key_encoding=slash,
                           fill_value=0, compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1),
                           config={"write_empty_chunks": False})
        a[...] = lv
        check("%s level %d" % (twin, k), a[...], lv)
    g.attrs.update({"multiscales": [ngff_multiscale("image", ["c", "z", "y", "x"], "0.4")]})
    lg = g.create_group("labels")
    lg.attrs.update({"labels": list(LABELS)})
    for name, dt in LABELS.items():
        one = lg.create_group(name)
        for k, lv in enumerate(labels[name]):
            comp = numcodecs.Zstd(level=5) if dt == "uint32" else numcodecs.Zlib(level=6)
            a = one.create_array(str(k), shape=lv.shape, dtype=np.dtype(dt).newbyteorder("<"), chunks=(4, 8, 8),
                                 chunk_key_encoding=slash, fill_value=0, compressors=comp,
                                 config={"write_empty_chunks": False})
            a[...] = lv
            check("%s label %s level %d" % (twin, name, k), a[...], lv)
        one.attrs.update({"multiscales": [ngff_multiscale(name, ["z", "y", "x"], "0.4")],
                          "image-label": image_label_meta(name, labels[name][0], "0.4")})

    for group, what in [(top, "OME-NGFF 0.5 (zarr v3, attributes.ome)"), (twin, "OME-NGFF 0.4 (zarr v2, .zattrs)")]:
        v = "v05" if group == top else "v04"
        for k in range(NGFF_LEVELS):
            record("ngff/%s/image/%d" % (v, k), group, images[k], "uint16", fill_bytes("uint16", 0), writer,
                   "%s image c,z,y,x level %d" % (what, k), ngff_level=k, npy=npys["image", k],
                   axes=["c", "z", "y", "x"])
            for name, dt in LABELS.items():
                record("ngff/%s/labels/%s/%d" % (v, name, k), group + "/labels/" + name, labels[name][k], dt,
                       fill_bytes(dt, 0), writer, "%s label %r z,y,x level %d" % (what, name, k), ngff_level=k,
                       npy=npys[name, k], axes=["z", "y", "x"])


if __name__ == "__main__":
    main()
