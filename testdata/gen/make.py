"""Write small zarr arrays with zarr-python 3, numcodecs and tensorstore, and
their expected contents, for the Go reader's cross-checks.

usage: make_stores.py OUTDIR SEED [small]

With "small", only a few small arrays are written: the committed fixtures
(testdata/, made with SEED 1).

OUTDIR receives one store per array (or OME-NGFF image) and, for each array
(each NGFF level), expected/NAME.npy holding its full contents as the writer
reads them back, little-endian and in C order, plus manifest.json listing
{name, path, ngff_level, npy, dtype, fill_le_hex, writer, exercises}. path
is the array's directory, or the image group's for NGFF levels (ngff_level
is then the level's index, else null); fill_le_hex is the fill value's
little-endian bytes. Every value comes from a generator seeded with SEED.

Each array is read back with the library that wrote it, and the script
fails unless that equals what was meant to be stored, bit for bit (NaN
payloads included), so the .npy files are what zarr-python or tensorstore
read, and what the Go reader must read.
"""

import json
import os
import shutil
import sys

import numpy as np
import numcodecs
import tensorstore as ts
import zarr
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                         TransposeCodec, ZstdCodec)
from zarr.codecs import LZ4 as NumcodecsLZ4

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]

OUT = None
RNG = None
MANIFEST = []
NOSYNC = ts.Context({"file_io_sync": False})


def random_data(dtype, shape):
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "b":
        a = RNG.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = RNG.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    else:
        a = (RNG.standard_normal(n) * 1000).astype(dt)
        # Special values: NaNs with payloads and signs, infinities, -0,
        # subnormals.
        bits = a.view("u%d" % dt.itemsize)
        special = {2: [0x7E01, 0xFC00, 0x7C00, 0x8000, 0x0001, 0xFE7F],
                   4: [0x7FC00001, 0xFF800000, 0x7F800000, 0x80000000, 0x00000001, 0xFFC12345],
                   8: [0x7FF8000000000001, 0xFFF0000000000000, 0x7FF0000000000000,
                       0x8000000000000000, 0x0000000000000001, 0xFFF8123456789ABC]}[dt.itemsize]
        for v in special:
            bits[RNG.integers(0, n)] = v
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


def record(name, path, expected, dtype, fill_b, writer, exercises, ngff_level=None):
    os.makedirs(os.path.join(OUT, "expected"), exist_ok=True)
    npy = os.path.join("expected", name + ".npy")
    np.save(os.path.join(OUT, npy), le(expected))
    MANIFEST.append(dict(name=name, path=path, ngff_level=ngff_level, npy=npy, dtype=dtname(dtype),
                         fill_le_hex=fill_b.hex(), writer=writer, exercises=exercises))


def check(name, got, want):
    if not same_bits(le(got), le(want)):
        raise SystemExit("%s: the writer reads back other bits than it was given" % name)


def zarr_array(name, data, exercises, chunks, fill=0, blanks=(), delete=(), **kw):
    """Write data with zarr-python; blanks are regions set to the fill value
    (left unwritten as empty chunks), delete are chunk keys to remove."""
    path = os.path.join("zp", name)
    full = os.path.join(OUT, path)
    dtype = kw.pop("dtype", data.dtype)
    a = zarr.create_array(full, shape=data.shape, dtype=dtype, chunks=chunks, fill_value=fill,
                          config={"write_empty_chunks": False}, **kw)
    fb = fill_bytes(dtype, fill)
    data = blank(data.copy(), fb, blanks)
    a[...] = data
    for key in delete:
        os.remove(os.path.join(full, key))
        blank(data, fb, [delete[key]])
    got = a[...]
    check(name, got, data)
    record(name, path, got, dtype, fb, "zarr-python %s" % zarr.__version__, exercises)
    return full


def main():
    global OUT, RNG
    OUT, seed = sys.argv[1], int(sys.argv[2])
    RNG = np.random.default_rng(seed)
    os.makedirs(OUT, exist_ok=True)
    if sys.argv[3:] == ["small"]:
        small_set()
        finish()
        return

    # --- zarr v3, every data type, default codecs (bytes + zstd), partial
    # edge chunks, a blank chunk left unwritten.
    for dt in DTYPES:
        d = random_data(dt, (13, 17))
        zarr_array("v3-%s" % dt, d, "v3 %s, default codecs, edge chunks, missing chunk" % dt, (5, 7),
                   blanks=[(slice(5, 10), slice(7, 14))])

    # Big-endian bytes codec.
    for dt in ["int16", "uint32", "int64", "float16", "float32", "float64"]:
        d = random_data(dt, (9, 11))
        zarr_array("v3-big-%s" % dt, d, "v3 bytes endian big, %s" % dt, (4, 4),
                   serializer=BytesCodec(endian="big"))

    # Codecs.
    d16 = lambda: random_data("int16", (6, 10, 7))
    zarr_array("v3-zstd-checksum", d16(), "zstd with checksum", (4, 4, 4),
               compressors=[ZstdCodec(level=3, checksum=True)])
    zarr_array("v3-zstd-nochecksum", d16(), "zstd without checksum, level -3", (4, 4, 4),
               compressors=[ZstdCodec(level=-3, checksum=False)])
    zarr_array("v3-gzip", d16(), "gzip", (4, 4, 4), compressors=[GzipCodec(level=6)])
    zarr_array("v3-crc32c", d16(), "zstd then crc32c", (4, 4, 4), compressors=[ZstdCodec(level=1), Crc32cCodec()])
    zarr_array("v3-crc32c-only", d16(), "crc32c without compression", (4, 4, 4), compressors=[Crc32cCodec()])
    zarr_array("v3-nocompression", d16(), "bytes only", (4, 4, 4), compressors=None)
    zarr_array("v3-lz4", d16(), "numcodecs.lz4", (4, 4, 4), compressors=[NumcodecsLZ4(acceleration=1)])
    zarr_array("v3-transpose", d16(), "transpose [2,0,1] then zstd", (4, 4, 4),
               filters=[TransposeCodec(order=(2, 0, 1))])
    zarr_array("v3-transpose-big", random_data("float32", (5, 9, 6)), "transpose [1,2,0], bytes big", (3, 4, 5),
               filters=[TransposeCodec(order=(1, 2, 0))], serializer=BytesCodec(endian="big"))
    for cname in ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]:
        for shuffle in ["noshuffle", "shuffle", "bitshuffle"]:
            for dt in (["uint16", "float64"] if shuffle != "noshuffle" else ["int32"]):
                d = random_data(dt, (40, 30)) if dt != "uint16" else \
                    (np.cumsum(RNG.integers(-2, 3, 1200)) + 30000).astype(np.uint16).reshape(40, 30)
                zarr_array("v3-blosc-%s-%s-%s" % (cname, shuffle, dt), d, "blosc %s %s %s" % (cname, shuffle, dt),
                           (16, 16), compressors=[BloscCodec(cname=cname, clevel=5, shuffle=shuffle,
                                                             typesize=np.dtype(dt).itemsize)])

    # Chunk key encodings.
    zarr_array("v3-keys-v2-dot", d16(), "chunk_key_encoding v2 '.'", (4, 4, 4),
               chunk_key_encoding={"name": "v2", "separator": "."})
    zarr_array("v3-keys-v2-slash", d16(), "chunk_key_encoding v2 '/'", (4, 4, 4),
               chunk_key_encoding={"name": "v2", "separator": "/"})
    zarr_array("v3-keys-default-dot", d16(), "chunk_key_encoding default '.'", (4, 4, 4),
               chunk_key_encoding={"name": "default", "separator": "."})

    # Sharding: index at the end and at the start, empty inner chunks, a
    # shard that is all fill (not written), nested sharding, a deleted shard.
    zarr_array("v3-shard-end", random_data("uint16", (20, 24)), "sharding, index at end, empty inner chunk",
               (10, 12), compressors=None, serializer=ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec(), ZstdCodec()]),
               blanks=[(slice(0, 5), slice(0, 4))])
    zarr_array("v3-shard-start", random_data("float32", (20, 24)), "sharding, index at start, fill-only shard",
               (10, 12), compressors=None, serializer=ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec(), ZstdCodec()],
                                                  index_location="start"),
               blanks=[(slice(10, 20), slice(12, 24))])
    zarr_array("v3-shard-partial", random_data("int32", (23, 19)), "sharding with partial edge shards",
               (10, 10), compressors=None, serializer=ShardingCodec(chunk_shape=(5, 5), codecs=[BytesCodec(endian="big"),
                                                                            GzipCodec(level=1)]))
    zarr_array("v3-shard-nested", random_data("int16", (16, 16)), "nested sharding (outer index at start)",
               (8, 8), compressors=None, serializer=ShardingCodec(chunk_shape=(4, 4), index_location="start", codecs=[
                   ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec()])]))
    zarr_array("v3-shard-blosc", random_data("uint16", (16, 20)), "sharding with blosc lz4 bitshuffle inner chunks",
               (8, 10), compressors=None, serializer=ShardingCodec(chunk_shape=(4, 5), codecs=[
                   BytesCodec(), BloscCodec(cname="lz4", shuffle="bitshuffle", typesize=2)]))
    zarr_array("v3-shard-deleted", random_data("uint8", (12, 12)), "a shard file deleted", (6, 6),
               compressors=None, serializer=ShardingCodec(chunk_shape=(3, 3), codecs=[BytesCodec(), ZstdCodec()]),
               delete={"c/1/0": (slice(6, 12), slice(0, 6))})
    zarr_array("v3-shard-then-zstd", random_data("uint32", (12, 10)),
               "sharding followed by a zstd of the whole shard (zarr-python's default compressors)", (6, 10),
               serializer=ShardingCodec(chunk_shape=(3, 5), codecs=[BytesCodec(), ZstdCodec()]))
    zarr_array("v3-deleted-chunk", random_data("int64", (7, 9)), "a chunk file deleted", (4, 4),
               delete={"c/0/1": (slice(0, 4), slice(4, 8))})

    # Fill values.
    # Not 9 x 9: a one-element edge chunk holding a NaN with a payload
    # would equal the NaN fill, go unwritten, and read back as the fill's
    # bits (zarr-python compares NaNs as equal when it skips empty chunks).
    zarr_array("v3-fill-nan", random_data("float32", (9, 10)), "fill NaN, missing chunk", (4, 4), fill=float("nan"),
               blanks=[(slice(0, 4), slice(4, 8))])
    zarr_array("v3-fill-inf", random_data("float64", (9, 9)), "fill Infinity", (4, 4), fill=float("inf"),
               blanks=[(slice(4, 8), slice(0, 4))])
    zarr_array("v3-fill-neginf", random_data("float16", (9, 9)), "fill -Infinity", (4, 4), fill=float("-inf"),
               blanks=[(slice(8, 9), slice(0, 4))])
    zarr_array("v3-fill-int", random_data("int16", (9, 9)), "fill -1234", (4, 4), fill=-1234,
               blanks=[(slice(4, 8), slice(4, 8))])
    zarr_array("v3-fill-bool", random_data("bool", (9, 9)), "fill true", (4, 4), fill=True,
               blanks=[(slice(0, 4), slice(0, 4))])
    zarr_array("v3-fill-uint64", random_data("uint64", (9, 9)), "fill 2^64-1", (4, 4), fill=2**64 - 1,
               blanks=[(slice(0, 4), slice(0, 4))])
    hex_fill_array()

    # 1-D and 4-D arrays.
    zarr_array("v3-1d", random_data("uint32", (101,)), "1-D", (10,))
    zarr_array("v3-4d", random_data("float32", (3, 4, 5, 6)), "4-D", (2, 3, 2, 4))

    v2_arrays()
    tensorstore_arrays()
    ngff_04((2, 9, 13, 11), 3)
    ngff_05()
    finish()


def small_set():
    """The committed fixtures: a few arrays of each writer, small files."""
    zarr_array("v3-shard-uint16", random_data("uint16", (12, 10)), "sharding, index at end, empty inner chunk",
               (6, 10), compressors=None, serializer=ShardingCodec(chunk_shape=(3, 5), codecs=[BytesCodec(), ZstdCodec()]),
               blanks=[(slice(0, 3), slice(0, 5))])
    zarr_array("v3-blosc-lz4-shuffle-float32", random_data("float32", (9, 7)), "blosc lz4 shuffle, edge chunks",
               (4, 4), compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)])
    zarr_array("v3-fill-nan", random_data("float32", (6, 6)), "fill NaN, missing chunk", (4, 4), fill=float("nan"),
               blanks=[(slice(0, 4), slice(4, 6))])
    zarr_array("v2-order-F-big-blosclz", random_data("int16", (5, 6, 3)), "v2 order F, big-endian, blosc blosclz",
               (3, 4, 2), zarr_format=2, order="F", dtype=">i2",
               compressors=numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=2))
    tensorstore_arrays(["ts-shard-zstd", "ts-shard-blosc-zstd"], small=True)
    ngff_04((1, 5, 6, 7), 2)


def finish():
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1)
        f.write("\n")
    print("wrote %d arrays (zarr-python %s, numcodecs %s, tensorstore)" % (len(MANIFEST), zarr.__version__,
                                                                           numcodecs.__version__))


def hex_fill_array():
    """A float32 array whose fill value is a NaN with a payload, written as
    a hex string; zarr-python writes "NaN" for any NaN, so the metadata is
    edited by hand."""
    name = "v3-fill-hex-nan"
    d = random_data("float32", (8, 8))
    path = os.path.join("zp", name)
    full = os.path.join(OUT, path)
    a = zarr.create_array(full, shape=d.shape, dtype="float32", chunks=(4, 4), fill_value=float("nan"),
                          config={"write_empty_chunks": False})
    a[...] = d
    shutil.rmtree(os.path.join(full, "c", "1"))  # chunks (1, 0) and (1, 1)
    meta_path = os.path.join(full, "zarr.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["fill_value"] = "0x7fc0abcd"
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    fb = (0x7FC0ABCD).to_bytes(4, "little")
    want = blank(d.copy(), fb, [(slice(4, 8), slice(0, 8))])
    got = zarr.open_array(full, mode="r")[...]
    if not same_bits(got, want):
        # Record what the metadata means, not zarr-python's reading, if
        # they differ; the manifest says so.
        record(name, path, want, "float32", fb, "zarr-python %s, fill_value edited" % zarr.__version__,
               "fill_value \"0x7fc0abcd\" (a NaN payload; zarr-python reads missing chunks as another NaN)")
        return
    record(name, path, got, "float32", fb, "zarr-python %s, fill_value edited" % zarr.__version__,
           "fill_value \"0x7fc0abcd\" (a NaN payload)")


def v2_arrays():
    for dt in ["bool", "int8", "uint8", "<i2", ">i2", "<u4", ">u4", "<i8", ">u8", "<f2", ">f2", "<f4", ">f8"]:
        d = random_data(np.dtype(dt).newbyteorder("="), (11, 7))
        name = "v2-%s" % dt.replace("<", "le").replace(">", "be")
        zarr_array(name, d, "v2 %s, zstd, edge chunks, missing chunk" % dt, (4, 3), zarr_format=2, dtype=dt,
                   compressors=numcodecs.Zstd(level=1), blanks=[(slice(4, 8), slice(3, 6))])
    d = lambda: random_data("int32", (10, 9))
    for comp, what in [(numcodecs.GZip(level=5), "gzip"), (numcodecs.Zlib(level=3), "zlib"),
                       (numcodecs.LZ4(acceleration=1), "lz4"), (None, "none"),
                       (numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1), "blosc-lz4-shuffle"),
                       (numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2), "blosc-zstd-bitshuffle"),
                       (numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=0), "blosc-blosclz"),
                       (numcodecs.Blosc(cname="zlib", clevel=1, shuffle=-1), "blosc-zlib-autoshuffle"),
                       (numcodecs.Zstd(level=5, checksum=True), "zstd-checksum")]:
        zarr_array("v2-%s" % what, d(), "v2 compressor %s" % what, (4, 4), zarr_format=2, compressors=comp)
    zarr_array("v2-order-F", random_data("<f4", (6, 7, 5)), "v2 order F", (4, 3, 2), zarr_format=2,
               order="F", compressors=numcodecs.Zstd(level=1))
    zarr_array("v2-order-F-big", random_data("uint16", (6, 7, 5)), "v2 order F, big-endian", (4, 3, 2),
               zarr_format=2, order="F", dtype=">u2", compressors=numcodecs.Blosc(cname="lz4", shuffle=1))
    zarr_array("v2-slash", random_data("int16", (9, 9)), "v2 dimension_separator '/'", (4, 4), zarr_format=2,
               chunk_key_encoding={"name": "v2", "separator": "/"}, compressors=numcodecs.Zstd(level=1))
    zarr_array("v2-fill-null", random_data("uint16", (9, 9)), "v2 fill_value null, missing chunk", (4, 4),
               zarr_format=2, fill=None, delete={"1.1": (slice(4, 8), slice(4, 8))})
    zarr_array("v2-fill-nan", random_data("<f8", (9, 10)), "v2 fill NaN, missing chunk", (4, 4), zarr_format=2,
               fill=float("nan"), blanks=[(slice(0, 4), slice(0, 4))])
    zarr_array("v2-fill-neginf", random_data("<f4", (9, 9)), "v2 fill -Infinity", (4, 4), zarr_format=2,
               fill=float("-inf"), blanks=[(slice(0, 4), slice(0, 4))])


def tensorstore_arrays(only=None, small=False):
    """Sharded v3 arrays written by tensorstore (its zstd frames carry no
    content size), and blosc snappy, which numcodecs lacks. only picks
    cases by name; small shrinks them."""
    def index():
        return [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]

    def shard(inner, codecs, at="end"):
        return {"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}] + codecs,
            "index_codecs": index(), "index_location": at}}

    def blosc(cname, shuffle, typesize):
        return {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle,
                                                   "typesize": typesize, "blocksize": 0}}

    cases = [
        ("ts-shard-zstd", "float32", (37, 45), (16, 16), shard([8, 8], [{"name": "zstd", "configuration": {"level": 3}}]),
         "tensorstore sharded, zstd without content size"),
        ("ts-shard-blosc-lz4", "uint16", (40, 33), (16, 16), shard([8, 8], [blosc("lz4", "shuffle", 2)]),
         "tensorstore sharded, blosc lz4 shuffle"),
        ("ts-shard-blosc-zstd", "float32", (30, 30), (16, 16), shard([8, 8], [blosc("zstd", "bitshuffle", 4)], "start"),
         "tensorstore sharded, blosc zstd bitshuffle, index at start"),
        ("ts-blosc-snappy", "int32", (30, 20), (8, 8), blosc("snappy", "shuffle", 4),
         "tensorstore blosc snappy (not sharded)"),
        ("ts-blosc-snappy-bit", "uint16", (30, 20), (8, 8), blosc("snappy", "bitshuffle", 2),
         "tensorstore blosc snappy bitshuffle"),
        ("ts-blosc-snappy-none", "float64", (20, 20), (8, 8), blosc("snappy", "noshuffle", 8),
         "tensorstore blosc snappy noshuffle"),
    ]
    for name, dt, shape, chunk, codec, what in cases:
        if only is not None and name not in only:
            continue
        if small:
            shape = tuple(min(n, 20) for n in shape)
        d = random_data(dt, shape) if dt != "uint16" else \
            (np.cumsum(RNG.integers(-2, 3, int(np.prod(shape)))) + 20000).astype(np.uint16).reshape(shape)
        path = os.path.join("ts", name)
        codecs = [codec] if codec["name"] == "sharding_indexed" else \
            [{"name": "bytes", "configuration": {"endian": "little"}}, codec]
        arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(OUT, path)},
                       "metadata": {"shape": list(shape), "data_type": dt,
                                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
                                    "codecs": codecs, "fill_value": 7}},
                      create=True, delete_existing=True, context=NOSYNC).result()
        arr.write(d).result()
        got = arr.read().result()
        check(name, got, d)
        record(name, path, got, dt, fill_bytes(dt, 7), "tensorstore", what)


def axes(names):
    kinds = {"t": ("time", "millisecond"), "c": ("channel", None), "z": ("space", "micrometer"),
             "y": ("space", "micrometer"), "x": ("space", "micrometer")}
    out = []
    for n in names:
        ax = {"name": n, "type": kinds[n][0]}
        if kinds[n][1]:
            ax["unit"] = kinds[n][1]
        out.append(ax)
    return out


def levels_of(d, space, n):
    out = [d]
    for _ in range(n - 1):
        idx = tuple(slice(None, None, 2) if s else slice(None) for s in space)
        out.append(np.ascontiguousarray(out[-1][idx]))
    return out


def multiscale(names, space, n, version=None):
    ms = {"name": "image", "axes": axes(names), "type": "nearest", "datasets": []}
    if version:
        ms["version"] = version
    for k in range(n):
        scale = [float(2 ** k) if s else 1.0 for s in space]
        ms["datasets"].append({"path": str(k), "coordinateTransformations": [
            {"type": "scale", "scale": scale}, {"type": "translation", "translation": [0.5 * k] * len(names)}]})
    return ms


def ngff_04(shape, nlevels):
    names, space = ["c", "z", "y", "x"], [False, True, True, True]
    d = random_data("uint16", shape)
    group = os.path.join("ngff", "v04")
    g = zarr.open_group(os.path.join(OUT, group), mode="w", zarr_format=2)
    levels = levels_of(d, space, nlevels)
    for k, lv in enumerate(levels):
        a = g.create_array(str(k), shape=lv.shape, dtype="<u2", chunks=(1, 4, 4, 4),
                           chunk_key_encoding={"name": "v2", "separator": "/"},
                           compressors=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2))
        a[...] = lv
        check("ngff-0.4 level %d" % k, a[...], lv)
    g.attrs.update({"multiscales": [multiscale(names, space, nlevels, "0.4")]})
    for k, lv in enumerate(levels):
        record("ngff-v04-level%d" % k, group, lv, "uint16", fill_bytes("uint16", 0),
               "zarr-python %s, NGFF metadata by hand" % zarr.__version__,
               "OME-NGFF 0.4 (v2, .zattrs multiscales, '/' keys) level %d" % k, ngff_level=k)


def ngff_05():
    names, space = ["t", "z", "y", "x"], [False, True, True, True]
    d = random_data("float32", (2, 10, 12, 9))
    group = os.path.join("ngff", "v05")
    g = zarr.open_group(os.path.join(OUT, group), mode="w", zarr_format=3)
    levels = levels_of(d, space, 2)
    for k, lv in enumerate(levels):
        a = g.create_array(str(k), shape=lv.shape, dtype="float32", chunks=(1, 4, 6, 6), shards=(2, 8, 12, 6),
                           dimension_names=names, fill_value=float("nan"))
        a[...] = lv
        check("ngff-0.5 level %d" % k, a[...], lv)
    g.attrs.update({"ome": {"version": "0.5", "multiscales": [multiscale(names, space, 2)]}})
    for k, lv in enumerate(levels):
        record("ngff-v05-level%d" % k, group, lv, "float32", fill_bytes("float32", float("nan")),
               "zarr-python %s, NGFF metadata by hand" % zarr.__version__,
               "OME-NGFF 0.5 (v3 attributes.ome, sharded levels) level %d" % k, ngff_level=k)


if __name__ == "__main__":
    main()
