// The status kernel: folds a wave's per-chunk nvCOMP statuses and decoded
// sizes into one damacy_status_summary, so that the host copies 32 bytes per
// wave (and reads its first word) instead of three per-chunk arrays.
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
