// Shared definitions of the assemble, status, LZ4 check and blosclz kernels. Every
// struct here is mirrored field for field by a Go struct (in ops.go,
// transform.go, misfit.go or kernels.go); the static_asserts below pin the
// layout, and a Go test reads them back and checks the Go side against
// the same numbers.
#ifndef DAMACY_KERNELS_H
#define DAMACY_KERNELS_H

#include <stddef.h>

#define DAMACY_MAX_RANK 8

// The assemble kernel runs DAMACY_ASSEMBLE_THREADS threads per block and
// gives each block DAMACY_ASSEMBLE_ELEMS_PER_BLOCK consecutive elements of
// one op, in DAMACY_ASSEMBLE_GROUPS groups of ELEMS_PER_THREAD elements
// per thread (each thread takes every 256th element, so a warp writes 32
// neighbours at a time).
#define DAMACY_ASSEMBLE_THREADS 256
#define DAMACY_ASSEMBLE_ELEMS_PER_THREAD 4
#define DAMACY_ASSEMBLE_GROUPS 8
#define DAMACY_ASSEMBLE_ELEMS_PER_BLOCK \
  (DAMACY_ASSEMBLE_THREADS * DAMACY_ASSEMBLE_ELEMS_PER_THREAD * DAMACY_ASSEMBLE_GROUPS)

// The status kernel is one block of this many threads.
#define DAMACY_STATUS_THREADS 1024

// Element types (Go: Dtype). 0 marks a fill op. BOOL through FLOAT64 are
// source types; FLOAT32, BFLOAT16 and the integer types but UINT64 are
// output types.
#define DAMACY_FILL 0
#define DAMACY_BOOL 1
#define DAMACY_INT8 2
#define DAMACY_INT16 3
#define DAMACY_INT32 4
#define DAMACY_INT64 5
#define DAMACY_UINT8 6
#define DAMACY_UINT16 7
#define DAMACY_UINT32 8
#define DAMACY_UINT64 9
#define DAMACY_FLOAT16 10
#define DAMACY_FLOAT32 11
#define DAMACY_FLOAT64 12
// Output only.
#define DAMACY_BFLOAT16 13

// Blosc shuffle modes of a source chunk (Go: Shuffle).
#define DAMACY_NOSHUFFLE 0
#define DAMACY_BYTESHUFFLE 1
#define DAMACY_BITSHUFFLE 2

// One copy or fill op (Go: Op). Coordinates are in elements. Dimensions at
// or beyond the launch's rank are zero.
struct damacy_op {
  // Arena byte offset of the source chunk's first decoded byte; a multiple
  // of the source item size. Zero for a fill op.
  long long src_offset;
  // Destination sample (the index along the batch's first axis).
  unsigned int sample;
  // The first CUDA block of this op; the block table maps blocks
  // first_block .. first_block+ceil(elems/ELEMS_PER_BLOCK)-1 to this op.
  unsigned int first_block;
  // The op's box: its start within the sample and its extents.
  unsigned int dst_start[DAMACY_MAX_RANK];
  unsigned int extent[DAMACY_MAX_RANK];
  // The box's start within the source chunk, the chunk's shape, and the
  // chunk's element strides per logical dimension (C order, F order and
  // transpose codecs are all just strides).
  unsigned int src_start[DAMACY_MAX_RANK];
  unsigned int src_shape[DAMACY_MAX_RANK];
  unsigned int src_stride[DAMACY_MAX_RANK];
  // Blosc layout of a shuffled chunk: its decoded bytes and block size
  // (the last block holds nbytes - (nblocks-1)*blocksize bytes). Zero when
  // the chunk is not shuffled.
  unsigned int nbytes;
  unsigned int blocksize;
  // The fill value (fill ops only): float32 bits for a float output; for
  // an integer output the value's low 32 bits, sign-extended for INT64.
  unsigned int fill;
  unsigned char src_dtype;   // DAMACY_FILL or a source dtype
  unsigned char shuffle;     // DAMACY_NOSHUFFLE, _BYTESHUFFLE, _BITSHUFFLE
  unsigned char typesize;    // blosc typesize of a shuffled chunk, else 0
  unsigned char big_endian;  // 1 when multi-byte elements are stored big endian
};

static_assert(offsetof(struct damacy_op, src_offset) == 0, "src_offset");
static_assert(offsetof(struct damacy_op, sample) == 8, "sample");
static_assert(offsetof(struct damacy_op, first_block) == 12, "first_block");
static_assert(offsetof(struct damacy_op, dst_start) == 16, "dst_start");
static_assert(offsetof(struct damacy_op, extent) == 48, "extent");
static_assert(offsetof(struct damacy_op, src_start) == 80, "src_start");
static_assert(offsetof(struct damacy_op, src_shape) == 112, "src_shape");
static_assert(offsetof(struct damacy_op, src_stride) == 144, "src_stride");
static_assert(offsetof(struct damacy_op, nbytes) == 176, "nbytes");
static_assert(offsetof(struct damacy_op, blocksize) == 180, "blocksize");
static_assert(offsetof(struct damacy_op, fill) == 184, "fill");
static_assert(offsetof(struct damacy_op, src_dtype) == 188, "src_dtype");
static_assert(offsetof(struct damacy_op, shuffle) == 189, "shuffle");
static_assert(offsetof(struct damacy_op, typesize) == 190, "typesize");
static_assert(offsetof(struct damacy_op, big_endian) == 191, "big_endian");
static_assert(sizeof(struct damacy_op) == 192, "sizeof damacy_op");

// The transform of one sample (Go: Transform). Output element y gets the
// element x of the untransformed sample with, for every output axis
// j < rank, x[perm[j]] = y[j], or shape[j]-1-y[j] when bit j of flips is
// set; shape[perm[j]] == shape[j]. Entries at and beyond the rank are the
// identity. With intensity set, every float32 value v (fills included)
// becomes clip(fadd_rn(fmul_rn(v, scale), offset), lo, hi), a NaN result
// 0x7FC00000, before any bfloat16 rounding (float outputs only).
struct damacy_transform {
  unsigned char perm[DAMACY_MAX_RANK];
  unsigned char flips;
  unsigned char intensity;
  unsigned short reserved;  // zero
  float scale;
  float offset;
  float lo;
  float hi;
};

static_assert(offsetof(struct damacy_transform, perm) == 0, "perm");
static_assert(offsetof(struct damacy_transform, flips) == 8, "flips");
static_assert(offsetof(struct damacy_transform, intensity) == 9, "intensity");
static_assert(offsetof(struct damacy_transform, reserved) == 10, "reserved");
static_assert(offsetof(struct damacy_transform, scale) == 12, "scale");
static_assert(offsetof(struct damacy_transform, offset) == 16, "offset");
static_assert(offsetof(struct damacy_transform, lo) == 20, "lo");
static_assert(offsetof(struct damacy_transform, hi) == 24, "hi");
static_assert(sizeof(struct damacy_transform) == 28, "sizeof damacy_transform");

// What the assemble kernel reports about values that do not fit an
// integer output (Go: MisfitStatus). All zeros means none; the host zeroes
// it before the launch.
struct damacy_misfits {
  unsigned long long count;  // elements that did not fit
  // ~(sample << 32 | in-sample output element index) of the first of them
  // in the batch's order, kept with atomicMax; 0 when none.
  unsigned long long first;
  unsigned long long value;  // its source value bits (byte-swapped to host order)
  unsigned int dtype;        // its source dtype
  unsigned int lock;         // guards value and dtype; zero outside a launch
};

static_assert(offsetof(struct damacy_misfits, count) == 0, "count");
static_assert(offsetof(struct damacy_misfits, first) == 8, "first");
static_assert(offsetof(struct damacy_misfits, value) == 16, "value");
static_assert(offsetof(struct damacy_misfits, dtype) == 24, "dtype");
static_assert(offsetof(struct damacy_misfits, lock) == 28, "lock");
static_assert(sizeof(struct damacy_misfits) == 32, "sizeof damacy_misfits");

// The assemble kernel's only parameter (Go: assembleParams).
struct damacy_assemble_params {
  unsigned long long ops;         // device address of the ops
  unsigned long long block_ops;   // device address of the block table (one op index per block)
  unsigned long long arena;       // device address of the wave's decoded chunks
  unsigned long long out;         // device address of the batch tensor [N, *shape]
  unsigned long long transforms;  // device address of N damacy_transforms; 0: identity for all
  unsigned long long misfits;     // device address of a damacy_misfits; 0: no misfit check
  unsigned int rank;              // sample rank, 1..DAMACY_MAX_RANK
  unsigned int out_dtype;         // an output type
  unsigned int shape[DAMACY_MAX_RANK];  // sample shape; zero beyond rank
};

static_assert(offsetof(struct damacy_assemble_params, ops) == 0, "ops");
static_assert(offsetof(struct damacy_assemble_params, block_ops) == 8, "block_ops");
static_assert(offsetof(struct damacy_assemble_params, arena) == 16, "arena");
static_assert(offsetof(struct damacy_assemble_params, out) == 24, "out");
static_assert(offsetof(struct damacy_assemble_params, transforms) == 32, "transforms");
static_assert(offsetof(struct damacy_assemble_params, misfits) == 40, "misfits");
static_assert(offsetof(struct damacy_assemble_params, rank) == 48, "rank");
static_assert(offsetof(struct damacy_assemble_params, out_dtype) == 52, "out_dtype");
static_assert(offsetof(struct damacy_assemble_params, shape) == 56, "shape");
static_assert(sizeof(struct damacy_assemble_params) == 88, "sizeof damacy_assemble_params");

// The status kernel's result (Go: StatusSummary): how many chunks of the
// wave failed, and the first of them.
struct damacy_status_summary {
  unsigned int bad;            // chunks whose status is not 0 or whose size is wrong
  unsigned int first;          // index of the first bad chunk; 0xFFFFFFFF when none
  int status;                  // its nvCOMP status
  unsigned int reserved;       // zero
  unsigned long long actual;   // its decoded size
  unsigned long long expected; // its expected size
};

static_assert(offsetof(struct damacy_status_summary, bad) == 0, "bad");
static_assert(offsetof(struct damacy_status_summary, first) == 4, "first");
static_assert(offsetof(struct damacy_status_summary, status) == 8, "status");
static_assert(offsetof(struct damacy_status_summary, reserved) == 12, "reserved");
static_assert(offsetof(struct damacy_status_summary, actual) == 16, "actual");
static_assert(offsetof(struct damacy_status_summary, expected) == 24, "expected");
static_assert(sizeof(struct damacy_status_summary) == 32, "sizeof damacy_status_summary");

// The status kernel's only parameter (Go: StatusParams).
struct damacy_status_params {
  unsigned long long statuses;  // device address of n int32 nvCOMP statuses
  unsigned long long actual;    // device address of n uint64 decoded sizes
  unsigned long long expected;  // device address of n uint64 expected sizes
  unsigned long long summary;   // device address of one damacy_status_summary
  unsigned int n;               // number of chunks
  unsigned int reserved;        // zero
};

static_assert(offsetof(struct damacy_status_params, statuses) == 0, "statuses");
static_assert(offsetof(struct damacy_status_params, actual) == 8, "actual");
static_assert(offsetof(struct damacy_status_params, expected) == 16, "expected");
static_assert(offsetof(struct damacy_status_params, summary) == 24, "summary");
static_assert(offsetof(struct damacy_status_params, n) == 32, "n");
static_assert(offsetof(struct damacy_status_params, reserved) == 36, "reserved");
static_assert(sizeof(struct damacy_status_params) == 40, "sizeof damacy_status_params");

// The LZ4 check kernel's threads per block.
#define DAMACY_LZ4_CHECK_THREADS 128

// The LZ4 check kernel's only parameter (Go: lz4CheckParams). The three
// arrays are n-entry slices of nvCOMP's own argument arrays.
struct damacy_lz4_check_params {
  unsigned long long ptrs;      // device address of n block addresses (rewritten on failure)
  unsigned long long lens;      // device address of n uint64 block lengths (rewritten on failure)
  unsigned long long expected;  // device address of n uint64 decoded sizes
  unsigned long long empty;     // device address of a one-byte empty LZ4 block (0x00)
  unsigned int n;               // number of blocks
  unsigned int reserved;        // zero
};

static_assert(offsetof(struct damacy_lz4_check_params, ptrs) == 0, "ptrs");
static_assert(offsetof(struct damacy_lz4_check_params, lens) == 8, "lens");
static_assert(offsetof(struct damacy_lz4_check_params, expected) == 16, "expected");
static_assert(offsetof(struct damacy_lz4_check_params, empty) == 24, "empty");
static_assert(offsetof(struct damacy_lz4_check_params, n) == 32, "n");
static_assert(offsetof(struct damacy_lz4_check_params, reserved) == 36, "reserved");
static_assert(sizeof(struct damacy_lz4_check_params) == 40, "sizeof damacy_lz4_check_params");

// The blosclz kernel's threads per block: one warp decodes one stream.
#define DAMACY_BLOSCLZ_THREADS 128

// The blosclz kernel's only parameter (Go: bloscLZParams). The six arrays
// are n-entry slices of nvCOMP's own argument arrays, read and written as
// nvCOMP's decoders do.
struct damacy_blosclz_params {
  unsigned long long ptrs;      // device address of n stream addresses
  unsigned long long lens;      // device address of n uint64 stream lengths
  unsigned long long outs;      // device address of n output addresses
  unsigned long long caps;      // device address of n uint64 decoded sizes (output capacities)
  unsigned long long actual;    // device address of n uint64 sizes written (output)
  unsigned long long statuses;  // device address of n int32 statuses (output; 0: decoded)
  unsigned int n;               // number of streams
  unsigned int reserved;        // zero
};

static_assert(offsetof(struct damacy_blosclz_params, ptrs) == 0, "ptrs");
static_assert(offsetof(struct damacy_blosclz_params, lens) == 8, "lens");
static_assert(offsetof(struct damacy_blosclz_params, outs) == 16, "outs");
static_assert(offsetof(struct damacy_blosclz_params, caps) == 24, "caps");
static_assert(offsetof(struct damacy_blosclz_params, actual) == 32, "actual");
static_assert(offsetof(struct damacy_blosclz_params, statuses) == 40, "statuses");
static_assert(offsetof(struct damacy_blosclz_params, n) == 48, "n");
static_assert(offsetof(struct damacy_blosclz_params, reserved) == 52, "reserved");
static_assert(sizeof(struct damacy_blosclz_params) == 56, "sizeof damacy_blosclz_params");

#endif
