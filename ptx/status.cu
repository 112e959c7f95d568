// The status and LZ4 check kernels. The status kernel folds a wave's
// per-chunk nvCOMP statuses and decoded sizes into one
// damacy_status_summary, so that the host copies 32 bytes per wave (and
// reads its first word) instead of three per-chunk arrays.
//
// It is a single block of DAMACY_STATUS_THREADS threads. A wave has at most
// tens of thousands of chunks, few enough for one block (100000 chunks take
// 37 us on an H200, a few thousand take a few); in exchange the kernel
// needs no atomics, no second pass and no zeroed output: it computes the
// whole summary and writes it once, so the summary buffer can be reused
// across waves without a memset.
#include "kernels.h"

typedef unsigned int u32;
typedef unsigned long long u64;

extern "C" __global__ void __launch_bounds__(DAMACY_STATUS_THREADS)
    damacy_reduce_status(const damacy_status_params p) {
  const int* __restrict__ statuses = reinterpret_cast<const int*>(p.statuses);
  const u64* __restrict__ actual = reinterpret_cast<const u64*>(p.actual);
  const u64* __restrict__ expected = reinterpret_cast<const u64*>(p.expected);
  const u32 none = 0xffffffffu;
  u32 bad = 0, first = none;
  for (u32 i = threadIdx.x; i < p.n; i += DAMACY_STATUS_THREADS) {
    if (statuses[i] != 0 || actual[i] != expected[i]) {
      bad++;
      first = min(first, i);
    }
  }
  // Sum the counts and take the smallest index: within each warp by
  // shuffles, then across the warps through shared memory.
  const u32 all = 0xffffffffu;
  for (u32 off = 16; off > 0; off >>= 1) {
    bad += __shfl_down_sync(all, bad, off);
    first = min(first, __shfl_down_sync(all, first, off));
  }
  __shared__ u32 warp_bad[DAMACY_STATUS_THREADS / 32];
  __shared__ u32 warp_first[DAMACY_STATUS_THREADS / 32];
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_bad[warp] = bad;
    warp_first[warp] = first;
  }
  __syncthreads();
  if (warp != 0) {
    return;
  }
  bad = warp_bad[lane];
  first = warp_first[lane];
  for (u32 off = 16; off > 0; off >>= 1) {
    bad += __shfl_down_sync(all, bad, off);
    first = min(first, __shfl_down_sync(all, first, off));
  }
  if (lane != 0) {
    return;
  }
  damacy_status_summary s;
  s.bad = bad;
  s.first = first;
  s.status = 0;
  s.reserved = 0;
  s.actual = 0;
  s.expected = 0;
  if (first != none) {
    s.status = statuses[first];
    s.actual = actual[first];
    s.expected = expected[first];
  }
  *reinterpret_cast<damacy_status_summary*>(p.summary) = s;
}

// The LZ4 check kernel: the GPU's copy of nvcomp.LZ4GPUCheck, run on a
// wave's LZ4 blocks just before nvCOMP decodes them. nvCOMP's LZ4 decoder
// bounds its writes by neither the output capacity nor, for damaged
// blocks, the compressed size; a block that passes this walk decodes to
// exactly its expected size with every reference inside its own output.
// A block that fails is swapped for the one-byte empty block: nvCOMP then
// decodes nothing for it, its size (0) differs from the expected one, and
// the status kernel reports it, so the host decodes that chunk on the CPU.
//
// One thread walks one block, reading only tokens, length bytes and
// offsets (through the read-only cache: the walk moves forward through
// each block, so most reads hit a cache line already loaded).

// lz4_walk is LZ4GPUCheck: true when the block decodes to exactly want
// bytes, ends with a literals-only sequence at its last byte, references
// nothing before the output's start and keeps the end-of-block rules (the
// last 5 bytes are literals, the last match starts at least 12 bytes
// before the end).
__device__ static bool lz4_walk(const unsigned char* __restrict__ b, u64 len, u64 want) {
  if (want == 0) {
    return false;
  }
  u64 p = 0, out = 0;
  for (;;) {
    if (p >= len) {
      return false;
    }
    const u32 token = __ldg(b + p);
    p++;
    u64 lit = token >> 4;
    if (lit == 15) {
      u32 x;
      do {
        if (p >= len) {
          return false;
        }
        x = __ldg(b + p);
        p++;
        lit += x;
      } while (x == 255);
    }
    if (lit > len - p || lit > want - out) {
      return false;
    }
    p += lit;
    out += lit;
    if (p == len) {
      return out == want && (token & 15) == 0;
    }
    if (len - p < 2) {
      return false;
    }
    const u64 offset = (u64)__ldg(b + p) | (u64)__ldg(b + p + 1) << 8;
    p += 2;
    if (offset == 0 || offset > out) {
      return false;
    }
    u64 match = (token & 15) + 4;
    if ((token & 15) == 15) {
      u32 x;
      do {
        if (p >= len) {
          return false;
        }
        x = __ldg(b + p);
        p++;
        match += x;
      } while (x == 255);
    }
    if (out + 12 > want || match + 5 + out > want) {
      return false;
    }
    out += match;
  }
}

extern "C" __global__ void __launch_bounds__(DAMACY_LZ4_CHECK_THREADS)
    damacy_lz4_check(const damacy_lz4_check_params p) {
  const u32 i = blockIdx.x * DAMACY_LZ4_CHECK_THREADS + threadIdx.x;
  if (i >= p.n) {
    return;
  }
  u64* ptrs = reinterpret_cast<u64*>(p.ptrs);
  u64* lens = reinterpret_cast<u64*>(p.lens);
  const u64* expected = reinterpret_cast<const u64*>(p.expected);
  const unsigned char* b = reinterpret_cast<const unsigned char*>(ptrs[i]);
  if (!lz4_walk(b, lens[i], expected[i])) {
    ptrs[i] = p.empty;
    lens[i] = 1;
  }
}
