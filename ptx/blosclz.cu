// The blosclz kernel: decodes the blosclz streams of blosc chunks on the
// GPU (nvCOMP has no blosclz). It takes nvCOMP's batched argument arrays
// and writes nvCOMP's outputs (decoded sizes, statuses), so a wave's
// blosclz streams sit beside its zstd and LZ4 ones and the status kernel
// folds all of them.
//
// One warp decodes one stream. blosclz (c-blosc's FastLZ-derived LZ77) is
// a sequence of tokens, each starting with a control byte ctrl:
//   - ctrl < 32: a literal run of ctrl+1 bytes;
//   - else a match of length (ctrl>>5)+2, plus length bytes (each 255
//     meaning another follows) when ctrl>>5 is 7; then a distance byte c:
//     the match starts (ctrl&31)<<8 + c + 1 bytes back, unless ctrl&31 is
//     31 and c is 255, when two big-endian bytes give a far distance of
//     their value + 8192.
// The first control byte is always a literal run (its top 3 bits are a
// marker). Every lane parses each token (the same loads, broadcast); the
// lanes copy its bytes together, 32 at a time. A match that overlaps its
// own output repeats its first dist bytes, so byte k of it is byte k % dist
// after its start: every byte a token reads was written by an earlier
// token, and __syncwarp between tokens orders those writes before the
// reads.
//
// A stream whose compressed length equals its decoded length is stored
// raw (c-blosc's rule) and copied. Every write is checked against the
// stream's output capacity and every read against its input length, so a
// damaged stream writes nothing outside its own output: it gets the status
// nvcompErrorCannotDecompress (12), and the bytes decoded so far as its
// size, and the host decodes its chunk on the CPU.
#include "kernels.h"

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned char u8;

#define BLOSCLZ_NEAR 8191u
#define BLOSCLZ_BAD 12

// blosclz_warp decodes the stream src[0:len) into dst[0:cap) with the
// warp, sets *out to the bytes written and returns 0, or
// BLOSCLZ_BAD when the stream is damaged.
__device__ static int blosclz_warp(const u8* __restrict__ src, u32 len, u8* __restrict__ dst, u32 cap, u32* out) {
  const u32 lane = threadIdx.x & 31;
  *out = 0;
  if (len == cap) {
    for (u32 k = lane; k < len; k += 32) {
      dst[k] = __ldg(src + k);
    }
    *out = len;
    return 0;
  }
  if (len == 0) {
    return BLOSCLZ_BAD;
  }
  u32 ip = 1, op = 0;
  u32 ctrl = __ldg(src) & 31u;
  for (;;) {
    if (ctrl < 32) {
      const u32 n = ctrl + 1;
      if (n > len - ip || n > cap - op) {
        *out = op;
        return BLOSCLZ_BAD;
      }
      if (lane < n) {
        dst[op + lane] = __ldg(src + ip + lane);
      }
      ip += n;
      op += n;
    } else {
      u32 length = (ctrl >> 5) + 2;
      if (length == 9) {
        u32 c;
        do {
          if (ip >= len) {
            *out = op;
            return BLOSCLZ_BAD;
          }
          c = __ldg(src + ip);
          ip++;
          length += c;
        } while (c == 255 && length <= cap);
      }
      if (ip >= len) {
        *out = op;
        return BLOSCLZ_BAD;
      }
      u32 dist = ((ctrl & 31u) << 8) + __ldg(src + ip) + 1;
      ip++;
      if (dist == BLOSCLZ_NEAR + 1) {
        if (len - ip < 2) {
          *out = op;
          return BLOSCLZ_BAD;
        }
        dist = ((u32)__ldg(src + ip) << 8 | __ldg(src + ip + 1)) + BLOSCLZ_NEAR + 1;
        ip += 2;
      }
      if (dist > op || length > cap - op) {
        *out = op;
        return BLOSCLZ_BAD;
      }
      const u8* from = dst + op - dist;
      u8* to = dst + op;
      if (dist >= length) {
        for (u32 k = lane; k < length; k += 32) {
          to[k] = from[k];
        }
      } else {
        for (u32 k = lane; k < length; k += 32) {
          to[k] = from[k % dist];
        }
      }
      op += length;
    }
    __syncwarp();
    if (ip >= len) {
      break;
    }
    ctrl = __ldg(src + ip);
    ip++;
  }
  *out = op;
  return 0;
}

extern "C" __global__ void __launch_bounds__(DAMACY_BLOSCLZ_THREADS)
    damacy_blosclz(const damacy_blosclz_params p) {
  const u32 i = blockIdx.x * (DAMACY_BLOSCLZ_THREADS / 32) + threadIdx.x / 32;
  if (i >= p.n) {
    return;
  }
  const u64* ptrs = reinterpret_cast<const u64*>(p.ptrs);
  const u64* lens = reinterpret_cast<const u64*>(p.lens);
  const u64* outs = reinterpret_cast<const u64*>(p.outs);
  const u64* caps = reinterpret_cast<const u64*>(p.caps);
  u32 written;
  int status = BLOSCLZ_BAD;
  // Entries are bounded far below 4 GiB (the engine's nvMax); a larger
  // one is refused rather than truncated.
  if (lens[i] < 0x80000000ull && caps[i] < 0x80000000ull) {
    status = blosclz_warp(reinterpret_cast<const u8*>(ptrs[i]), (u32)lens[i], reinterpret_cast<u8*>(outs[i]),
                          (u32)caps[i], &written);
  } else {
    written = 0;
  }
  if ((threadIdx.x & 31) == 0) {
    reinterpret_cast<u64*>(p.actual)[i] = written;
    reinterpret_cast<int*>(p.statuses)[i] = status;
  }
}
