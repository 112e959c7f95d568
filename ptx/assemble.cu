// The assemble kernel: one launch per wave gathers the wave's decoded
// chunks out of the arena into the batch tensor [N, *shape], undoing blosc
// byte or bit shuffle, byte order and the chunk's axis order on the way,
// casting every element to float32 or bfloat16 (or passing it through to
// an integer output type), applying each sample's transform, and writing
// fill values where a box has no source. host.go's AssembleHost is its
// exact host twin.
//
// Work layout, and why:
// - Each op is a box: a destination region of one sample and, for a copy,
//   the same-shaped region of one chunk. The host splits every op into
//   blocks of ELEMS_PER_BLOCK (8192) consecutive elements of the box, in
//   the box's C order, and writes a block table (one op index per CUDA
//   block). A block finds its op with one load: no search, no atomics, and
//   a wave of thousands of ops of very different sizes is one launch whose
//   blocks all carry the same amount of work.
// - Within a block, thread t handles elements t, t+256, t+512, ..., four
//   at a time so that their loads overlap, and a warp handles 32
//   neighbours along the box's last axis: the writes into the C-ordered
//   output are coalesced, and for C-ordered sources so are the reads. Rows
//   shorter than a warp still fill warps, because the linear index runs
//   across rows.
// - An element's coordinates come from its linear index by division by the
//   box extents. Those divisions use per-block magic numbers (multiply-high,
//   add, shift), so a rank-3 element costs a handful of integer operations.
// - All per-op constants (the op itself, the divisors, the output strides,
//   the blosc block geometry) are computed once per block into shared
//   memory by a few threads in parallel; the element loop reads only
//   shared memory, the arena and the output. The setup (two dependent
//   loads, a few 64-bit divisions, two barriers) is amortised over eight
//   groups of 1024 elements per block, and the kernel is held to 64
//   registers so that four blocks fit on an SM. Measured on an H200 on
//   the throughput scenario's geometry (128^3 boxes, 32x64x64 uint16
//   chunks), this layout writes 1.30 TB/s of float32 (0.66 TB/s of
//   bfloat16), against 0.96 TB/s for one group of 2048 per block at 76
//   registers; 4096 and 16384 elements per block, or 8 elements per
//   thread, were slower. From byte-shuffled chunks it writes 0.90 TB/s on
//   an H100 (0.42 when each element's bytes came from an out-of-line
//   load, one element at a time).
// - The rank is a template parameter (one instantiation per rank), so the
//   coordinate loops unroll fully; the dtype, shuffle mode and byte order
//   are per op and therefore uniform across a block: branching on them
//   costs no divergence.
// - Byte-shuffled and bit-shuffled sources are read in place: an element's
//   bytes (or bits) are fetched from their shuffled positions within their
//   blosc block, the short last block included, exactly as c-blosc lays
//   them out. There is no separate unshuffle pass and no scratch memory.
// - Casts use integer bit arithmetic where the hardware would differ from
//   the host (NaN payloads, float16, bfloat16), and IEEE round-to-nearest
//   conversions (cvt.rn) elsewhere, which Go's conversions also use. Only
//   PTX ISA 8.0 / sm_75 features are used, so no bf16 cvt.
// - Per-sample transforms (a table of damacy_transform, one per sample, or
//   none) cost the element loop nothing for their geometry: a signed axis
//   permutation is folded into the op's output strides, which the setup
//   permutes and negates (u32 arithmetic wraps, and every index it sums
//   to lies inside the sample), and into the op's base offset. The
//   intensity map (a rounded multiply and add, a clip) is one more
//   per-group branch on a block-uniform flag, taken only when it applies.
// - Integer outputs (labels) run an out-of-line copy of the group loop
//   (assemble_ints.h), chosen once per block from the launch's output
//   type, so the float loop's code is what it was: values convert to
//   64-bit integers and are checked against the output's range (a float
//   must be finite and integral). A value that does not fit is a misfit,
//   never wrapped: with a status in the launch, each warp with misfits
//   adds their count with one atomic and offers its earliest (in the
//   batch's order) to the status, where an atomicMax on the inverted
//   position and a lock around the value keep the batch's first misfit
//   and its value, whatever the order the blocks run in.
// - What the float path gained with transforms and integer outputs: the
//   per-block setup loads the sample's transform (a warp of its own, when
//   the launch has a table) and sums the base offset in a second loop;
//   the group loop tests the intensity flag; the element work is
//   unchanged.
#include "kernels.h"

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Division of n < 2^31 by a fixed 1 <= d <= 2^31 with a multiply-high
// (Granlund and Montgomery): q = (umulhi(n, m) + n) >> s.
struct fastdiv {
  u32 d, m, s;
};

__device__ __noinline__ fastdiv make_fastdiv(u32 d) {
  fastdiv f;
  f.d = d;
  f.s = 32 - __clz(d - 1);
  f.m = (u32)(((1ull << 32) * ((1ull << f.s) - d)) / d + 1);
  return f;
}

__device__ __forceinline__ u32 divide(u32 n, const fastdiv& f) {
  return (__umulhi(n, f.m) + n) >> f.s;
}

// Per-block constants of one op.
struct op_ctx {
  damacy_op op;
  damacy_transform tf;           // the op's sample's transform (read only with a table)
  fastdiv ext[DAMACY_MAX_RANK];  // box extents
  // Output element strides within a sample, per box axis: C-order strides,
  // permuted and negated (mod 2^32) by the sample's transform.
  u32 ostride[DAMACY_MAX_RANK];
  u64 sample_base;               // output element index of the sample's first element
  u32 dst_base;                  // in-sample element index of the box's first element
  u32 src_base;                  // chunk element index of the box's first element
  u32 elems;                     // elements in the box
  u32 itemsize;                  // source item size in bytes
  // Blosc geometry of a shuffled source.
  fastdiv block;                 // blocksize
  fastdiv type;                  // typesize
  fastdiv per_block;             // blocksize / typesize elements per full block
  u32 last_block;                // index of the last block
  u32 n_full;                    // typesize units in a full block
  u32 n_last;                    // typesize units in the last block
  u32 whole;                     // typesize == itemsize and blocksize % typesize == 0
  u32 scaled;                    // the transform's intensity map applies
};

__device__ __forceinline__ u32 itemsize_of(u32 dtype) {
  switch (dtype) {
    case DAMACY_INT16:
    case DAMACY_UINT16:
    case DAMACY_FLOAT16:
      return 2;
    case DAMACY_INT32:
    case DAMACY_UINT32:
    case DAMACY_FLOAT32:
      return 4;
    case DAMACY_INT64:
    case DAMACY_UINT64:
    case DAMACY_FLOAT64:
      return 8;
    default:
      return 1;
  }
}

// Arena loads are plain loads (cached in L1 on sm_70 and later): nvcc 13
// compiles __ldg to calls of external functions that the driver's JIT
// cannot resolve.
__device__ __forceinline__ u32 load_byte(const u8* __restrict__ chunk, u32 pos) {
  return chunk[pos];
}

// The stored bytes of element e of an unshuffled chunk, byte j in bits
// 8j..8j+7. The chunk offset is a multiple of the item size.
__device__ __forceinline__ u64 load_plain(const u8* __restrict__ chunk, u32 e, u32 size) {
  switch (size) {
    case 1:
      return chunk[e];
    case 2:
      return reinterpret_cast<const u16*>(chunk)[e];
    case 4:
      return reinterpret_cast<const u32*>(chunk)[e];
    default:
      return reinterpret_cast<const u64*>(chunk)[e];
  }
}

// Where byte p of the unshuffled chunk sits in the byte-shuffled chunk.
__device__ __forceinline__ u32 byteshuffled_pos(const op_ctx& c, u32 p) {
  u32 b = divide(p, c.block);
  u32 o = p - b * c.op.blocksize;
  u32 n = b == c.last_block ? c.n_last : c.n_full;
  if (o >= n * c.op.typesize) {
    return p;  // the block's trailing bytes are stored as they are
  }
  u32 i = divide(o, c.type);
  u32 k = o - i * c.op.typesize;
  return b * c.op.blocksize + k * n + i;
}

// A byte assembled from bit sh of chunk[at], chunk[at+row], ...,
// chunk[at+7*row] (bit 0 first).
__device__ __forceinline__ u32 bit_gather(const u8* __restrict__ chunk, u32 at, u32 row, u32 sh) {
  u32 v = 0;
#pragma unroll
  for (u32 bit = 0; bit < 8; bit++) {
    v |= ((load_byte(chunk, at + bit * row) >> sh) & 1) << bit;
  }
  return v;
}

// Byte p of the unshuffled chunk, read from the bit-shuffled chunk.
__device__ __forceinline__ u32 bitshuffled_byte(const u8* __restrict__ chunk, const op_ctx& c, u32 p) {
  u32 b = divide(p, c.block);
  u32 o = p - b * c.op.blocksize;
  u32 n = b == c.last_block ? c.n_last : c.n_full;
  if ((n & 7) != 0 || o >= n * c.op.typesize) {
    return load_byte(chunk, p);  // block not bit-shuffled, or its trailing bytes
  }
  u32 i = divide(o, c.type);
  u32 k = o - i * c.op.typesize;
  u32 row = n >> 3;
  return bit_gather(chunk, b * c.op.blocksize + k * 8 * row + (i >> 3), row, i & 7);
}

// Where element e of a byte-shuffled chunk whose elements each lie inside
// one block (c.whole) starts: its first byte at at, the next ones a plane
// (plane bytes) apart.
__device__ __forceinline__ void byteshuffled_at(const op_ctx& c, u32 e, u32& at, u32& plane) {
  u32 b = divide(e, c.per_block);
  u32 i = e - b * c.n_full;
  plane = b == c.last_block ? c.n_last : c.n_full;
  at = b * c.op.blocksize + i;
}

__device__ __noinline__ u64 load_byteshuffled(const u8* __restrict__ chunk, const op_ctx& c, u32 e) {
  u32 size = c.itemsize;
  u64 v = 0;
  if (c.whole) {
    u32 at, n;
    byteshuffled_at(c, e, at, n);
    for (u32 j = 0; j < size; j++) {
      v |= (u64)load_byte(chunk, at + j * n) << (8 * j);
    }
    return v;
  }
  for (u32 j = 0; j < size; j++) {
    v |= (u64)load_byte(chunk, byteshuffled_pos(c, e * size + j)) << (8 * j);
  }
  return v;
}

__device__ __noinline__ u64 load_bitshuffled(const u8* __restrict__ chunk, const op_ctx& c, u32 e) {
  u32 size = c.itemsize;
  u64 v = 0;
  if (c.whole) {
    u32 b = divide(e, c.per_block);
    u32 i = e - b * c.n_full;
    u32 n = b == c.last_block ? c.n_last : c.n_full;
    if ((n & 7) != 0) {
      return load_plain(chunk, e, size);  // this block was copied, not bit-shuffled
    }
    u32 row = n >> 3;
    u32 at = b * c.op.blocksize + (i >> 3);
    for (u32 j = 0; j < size; j++) {
      v |= (u64)bit_gather(chunk, at + j * 8 * row, row, i & 7) << (8 * j);
    }
    return v;
  }
  for (u32 j = 0; j < size; j++) {
    v |= (u64)bitshuffled_byte(chunk, c, e * size + j) << (8 * j);
  }
  return v;
}

__device__ __forceinline__ u64 swap_bytes(u64 v, u32 size) {
  switch (size) {
    case 2:
      return ((v & 0xff) << 8) | ((v >> 8) & 0xff);
    case 4:
      return __byte_perm((u32)v, 0, 0x0123);
    case 8:
      return ((u64)__byte_perm((u32)v, 0, 0x0123) << 32) | __byte_perm((u32)(v >> 32), 0, 0x0123);
    default:
      return v;
  }
}

// float16 bits to float32 bits, exact; a NaN keeps its sign and payload
// and becomes quiet.
__device__ __forceinline__ u32 half_to_float_bits(u32 h) {
  u32 sign = (h & 0x8000) << 16;
  u32 exp = (h >> 10) & 0x1f;
  u32 man = h & 0x3ff;
  if (exp == 0x1f) {
    return man == 0 ? sign | 0x7f800000 : sign | 0x7fc00000 | (man << 13);
  }
  if (exp == 0) {
    if (man == 0) {
      return sign;
    }
    u32 s = __clz(man) - 21;  // shift the leading one to bit 10
    return sign | ((113 - s) << 23) | (((man << s) & 0x3ff) << 13);
  }
  return sign | ((exp + 112) << 23) | (man << 13);
}

// float64 bits to float32 bits: round to nearest even; a NaN keeps its
// sign and the high bits of its payload and becomes quiet.
__device__ __forceinline__ u32 double_to_float_bits(u64 v) {
  if ((v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
    return ((u32)(v >> 32) & 0x80000000u) | 0x7fc00000u | ((u32)(v >> 29) & 0x003fffffu);
  }
  return __float_as_uint(__double2float_rn(__longlong_as_double((long long)v)));
}

// float32 bits to bfloat16 bits: round to nearest even; every NaN becomes
// the canonical 0x7FFF.
__device__ __forceinline__ u32 to_bfloat16(u32 b) {
  if ((b & 0x7fffffffu) > 0x7f800000u) {
    return 0x7fff;
  }
  return (b + 0x7fffu + ((b >> 16) & 1)) >> 16;
}

#define EPT DAMACY_ASSEMBLE_ELEMS_PER_THREAD

// Runs stmt for every valid slot k < n; the loop is unrolled so that the
// per-slot arrays stay in registers and the loads overlap.
#define EACH(n, stmt)                        \
  _Pragma("unroll") for (u32 k = 0; k < EPT; k++) { \
    if (k < (n)) {                           \
      stmt;                                  \
    }                                        \
  }

// The source element index (chunk elements) and in-sample output index of
// this thread's elements of the block, and how many of them exist.
template <int R>
__device__ __forceinline__ u32 locate(const op_ctx& c, u32 first, u32 (&src)[EPT], u32 (&dst)[EPT]) {
  u32 n = 0;
#pragma unroll
  for (u32 k = 0; k < EPT; k++) {
    u32 idx = first + k * DAMACY_ASSEMBLE_THREADS + threadIdx.x;
    u32 rem = idx;
    u32 d = c.dst_base;
    u32 s = c.src_base;
#pragma unroll
    for (int a = R - 1; a > 0; a--) {
      u32 q = divide(rem, c.ext[a]);
      u32 x = rem - q * c.ext[a].d;
      rem = q;
      d += x * c.ostride[a];
      s += x * c.op.src_stride[a];
    }
    dst[k] = d + rem * c.ostride[0];
    src[k] = s + rem * c.op.src_stride[0];
    n += idx < c.elems;
  }
  return n;
}

__device__ __forceinline__ u32 locate_rank(u32 rank, const op_ctx& c, u32 first, u32 (&src)[EPT], u32 (&dst)[EPT]) {
  switch (rank) {
    case 1:
      return locate<1>(c, first, src, dst);
    case 2:
      return locate<2>(c, first, src, dst);
    case 3:
      return locate<3>(c, first, src, dst);
    case 4:
      return locate<4>(c, first, src, dst);
    case 5:
      return locate<5>(c, first, src, dst);
    case 6:
      return locate<6>(c, first, src, dst);
    case 7:
      return locate<7>(c, first, src, dst);
    default:
      return locate<8>(c, first, src, dst);
  }
}

// Reads the stored bytes of this thread's elements from the op's chunk,
// in host byte order: value bits as Float32Bits and IntBits take them.
__device__ __forceinline__ void load_elems(const u8* __restrict__ chunk, const op_ctx& c, u32 n,
                                           const u32 (&src)[EPT], u64 (&raw)[EPT]) {
  const u32 size = c.itemsize;
  switch (c.op.shuffle) {
    case DAMACY_BYTESHUFFLE:
      if (c.whole && (size == 2 || size == 4)) {
        // The common case inline, all of the thread's byte loads issued
        // before any is used: through the out-of-line load_byteshuffled
        // they went one element at a time, and the gather ran at a third
        // of its unshuffled rate.
        u32 at[EPT], plane[EPT];
        EACH(n, byteshuffled_at(c, src[k], at[k], plane[k]));
        if (size == 2) {
          EACH(n, raw[k] = load_byte(chunk, at[k]) | load_byte(chunk, at[k] + plane[k]) << 8);
        } else {
          EACH(n, raw[k] = load_byte(chunk, at[k]) | load_byte(chunk, at[k] + plane[k]) << 8 |
                           load_byte(chunk, at[k] + 2 * plane[k]) << 16 |
                           (u32)load_byte(chunk, at[k] + 3 * plane[k]) << 24);
        }
      } else {
        EACH(n, raw[k] = load_byteshuffled(chunk, c, src[k]));
      }
      break;
    case DAMACY_BITSHUFFLE:
      EACH(n, raw[k] = load_bitshuffled(chunk, c, src[k]));
      break;
    default:
      switch (size) {
        case 1:
          EACH(n, raw[k] = chunk[src[k]]);
          break;
        case 2:
          EACH(n, raw[k] = reinterpret_cast<const u16*>(chunk)[src[k]]);
          break;
        case 4:
          EACH(n, raw[k] = reinterpret_cast<const u32*>(chunk)[src[k]]);
          break;
        default:
          EACH(n, raw[k] = reinterpret_cast<const u64*>(chunk)[src[k]]);
          break;
      }
  }
  if (c.op.big_endian) {
    EACH(n, raw[k] = swap_bytes(raw[k], size));
  }
}

// Reads this thread's elements and turns them into float32 bits.
__device__ __forceinline__ void gather(const damacy_assemble_params& p, const op_ctx& c, u32 n,
                                       const u32 (&src)[EPT], u32 (&bits)[EPT]) {
  u64 raw[EPT];
  load_elems(reinterpret_cast<const u8*>(p.arena) + c.op.src_offset, c, n, src, raw);
  switch (c.op.src_dtype) {
    case DAMACY_BOOL:
      EACH(n, bits[k] = (raw[k] & 0xff) != 0 ? 0x3f800000u : 0u);
      break;
    case DAMACY_INT8:
      EACH(n, bits[k] = __float_as_uint(__int2float_rn((int)(signed char)(u8)raw[k])));
      break;
    case DAMACY_INT16:
      EACH(n, bits[k] = __float_as_uint(__int2float_rn((int)(short)(u16)raw[k])));
      break;
    case DAMACY_INT32:
      EACH(n, bits[k] = __float_as_uint(__int2float_rn((int)(u32)raw[k])));
      break;
    case DAMACY_INT64:
      EACH(n, bits[k] = __float_as_uint(__ll2float_rn((long long)raw[k])));
      break;
    case DAMACY_UINT8:
    case DAMACY_UINT16:
    case DAMACY_UINT32:
      EACH(n, bits[k] = __float_as_uint(__uint2float_rn((u32)raw[k])));
      break;
    case DAMACY_UINT64:
      EACH(n, bits[k] = __float_as_uint(__ull2float_rn(raw[k])));
      break;
    case DAMACY_FLOAT16:
      EACH(n, bits[k] = half_to_float_bits((u32)raw[k] & 0xffff));
      break;
    case DAMACY_FLOAT32:
      EACH(n, bits[k] = (u32)raw[k]);
      break;
    default:  // DAMACY_FLOAT64
      EACH(n, bits[k] = double_to_float_bits(raw[k]));
      break;
  }
}

// The intensity map of transform tf on float32 bits b (Go:
// Transform.mapBits): a multiply and an add, each rounded, never fused; a
// NaN result is 0x7FC00000 (tested first, so that no rewriting of the
// clip into max/min could turn a NaN into a bound); then the clip.
__device__ __forceinline__ u32 adjust(const damacy_transform& tf, u32 b) {
  float r = __fadd_rn(__fmul_rn(__uint_as_float(b), tf.scale), tf.offset);
  if (r != r) {
    return 0x7fc00000u;
  }
  r = r < tf.lo ? tf.lo : r;
  r = r > tf.hi ? tf.hi : r;
  return __float_as_uint(r);
}

#include "assemble_ints.h"

extern "C" __global__ void __launch_bounds__(DAMACY_ASSEMBLE_THREADS, 4)
    damacy_assemble(const damacy_assemble_params p) {
  __shared__ op_ctx c;
  const u32 t = threadIdx.x;
  const u32 words = sizeof(damacy_op) / 4;
  // Threads from tf_loader on load the sample's transform: a warp of
  // their own, beside the op's.
  constexpr u32 tf_loader = 64;
  if (t < words) {
    u32 index = reinterpret_cast<const u32*>(p.block_ops)[blockIdx.x];
    const u32* op = reinterpret_cast<const u32*>(reinterpret_cast<const damacy_op*>(p.ops) + index);
    reinterpret_cast<u32*>(&c.op)[t] = op[t];
  } else if (p.transforms != 0 && t >= tf_loader && t < tf_loader + sizeof(damacy_transform) / 4) {
    u32 index = reinterpret_cast<const u32*>(p.block_ops)[blockIdx.x];
    u32 sample = reinterpret_cast<const damacy_op*>(p.ops)[index].sample;
    const u32* tf = reinterpret_cast<const u32*>(reinterpret_cast<const damacy_transform*>(p.transforms) + sample);
    reinterpret_cast<u32*>(&c.tf)[t - tf_loader] = tf[t - tf_loader];
  }
  __syncthreads();
  const u32 rank = p.rank;
  if (t < rank) {
    c.ext[t] = make_fastdiv(c.op.extent[t]);
  } else if (t == DAMACY_MAX_RANK) {
    // Output axis d (C stride `stride`) takes box axis a, backwards when
    // flipped: then the box's element 0 along a lands at shape[d]-1, and
    // each step moves -stride (u32 arithmetic wraps, and every output
    // index it sums to lies in [0, 2^32)). Without a table a = d.
    const bool tf = p.transforms != 0;
    u32 stride = 1, base = 0;
    u32 src = 0, elems = 1;
#pragma unroll
    for (int d = DAMACY_MAX_RANK - 1; d >= 0; d--) {
      if (d < (int)rank) {
        const u32 a = tf ? c.tf.perm[d] & (DAMACY_MAX_RANK - 1) : d;
        const bool flip = tf && ((c.tf.flips >> d) & 1) != 0;
        c.ostride[a] = flip ? 0u - stride : stride;
        base += flip ? (p.shape[d] - 1) * stride : 0u;
        src += c.op.src_start[d] * c.op.src_stride[d];
        elems *= c.op.extent[d];
        stride *= p.shape[d];
      }
    }
    u32 dst = base;
#pragma unroll
    for (int d = 0; d < DAMACY_MAX_RANK; d++) {
      if (d < (int)rank) {
        dst += c.op.dst_start[d] * c.ostride[d];
      }
    }
    c.sample_base = (u64)c.op.sample * stride;
    c.dst_base = dst;
    c.src_base = src;
    c.elems = elems;
    c.itemsize = itemsize_of(c.op.src_dtype);
    c.scaled = tf && c.tf.intensity != 0;
  } else if (t == DAMACY_MAX_RANK + 1 && c.op.shuffle != DAMACY_NOSHUFFLE) {
    u32 bs = c.op.blocksize, ts = c.op.typesize;
    c.block = make_fastdiv(bs);
    c.type = make_fastdiv(ts);
    c.last_block = (c.op.nbytes - 1) / bs;
    c.n_full = bs / ts;
    c.n_last = (c.op.nbytes - c.last_block * bs) / ts;
    c.whole = ts == itemsize_of(c.op.src_dtype) && bs % ts == 0;
    c.per_block = make_fastdiv(c.whole ? bs / ts : 1);
  }
  __syncthreads();
  const u32 first = (blockIdx.x - c.op.first_block) * DAMACY_ASSEMBLE_ELEMS_PER_BLOCK;
  if (p.out_dtype != DAMACY_FLOAT32 && p.out_dtype != DAMACY_BFLOAT16) {
    assemble_ints(c, first, rank, p.arena, p.out, p.out_dtype, p.misfits);
    return;
  }
#pragma unroll 1
  for (u32 g = 0; g < DAMACY_ASSEMBLE_GROUPS; g++) {
    const u32 group = first + g * DAMACY_ASSEMBLE_THREADS * EPT;
    if (group >= c.elems) {
      return;
    }
    u32 src[EPT], dst[EPT], bits[EPT];
    const u32 n = locate_rank(rank, c, group, src, dst);
    if (c.op.src_dtype == DAMACY_FILL) {
      EACH(n, bits[k] = c.op.fill);
    } else {
      gather(p, c, n, src, bits);
    }
    if (c.scaled) {
      EACH(n, bits[k] = adjust(c.tf, bits[k]));
    }
    // The casts and the bfloat16 rounding are the host's (dtype.go).
    if (p.out_dtype == DAMACY_BFLOAT16) {
      u16* __restrict__ out = reinterpret_cast<u16*>(p.out) + c.sample_base;
      EACH(n, out[dst[k]] = (u16)to_bfloat16(bits[k]));
    } else {
      u32* __restrict__ out = reinterpret_cast<u32*>(p.out) + c.sample_base;
      EACH(n, out[dst[k]] = bits[k]);
    }
  }
}
