// The integer-output path of the assemble kernel (assemble.cu includes
// it after the gather, whose helpers it uses): values pass through to an
// integer output type without float conversion, and those that do not fit
// it are counted into a damacy_misfits. Go: intconv.go, misfit.go and
// host.go's intRow are its host twin.
#ifndef DAMACY_ASSEMBLE_INTS_H
#define DAMACY_ASSEMBLE_INTS_H

// The range of an integer output type (Go: intRange).
__device__ __forceinline__ void int_range(u32 dtype, long long& lo, long long& hi) {
  switch (dtype) {
    case DAMACY_INT8:
      lo = -128;
      hi = 127;
      break;
    case DAMACY_INT16:
      lo = -32768;
      hi = 32767;
      break;
    case DAMACY_INT32:
      lo = -2147483647LL - 1;
      hi = 2147483647LL;
      break;
    case DAMACY_UINT8:
      lo = 0;
      hi = 255;
      break;
    case DAMACY_UINT16:
      lo = 0;
      hi = 65535;
      break;
    case DAMACY_UINT32:
      lo = 0;
      hi = 4294967295LL;
      break;
    default:  // DAMACY_INT64
      lo = -9223372036854775807LL - 1;
      hi = 9223372036854775807LL;
      break;
  }
}

// A float as an integer, and whether it is one: finite, integral and in
// [-2^63, 2^63); else 0 (Go: floatInt). A NaN fails the first test.
__device__ __forceinline__ bool float_to_int(float f, long long& v) {
  const bool ok = f == truncf(f) && f >= -9223372036854775808.0f && f < 9223372036854775808.0f;
  v = ok ? __float2ll_rz(f) : 0;
  return ok;
}

__device__ __forceinline__ bool double_to_int(double f, long long& v) {
  const bool ok = f == trunc(f) && f >= -9223372036854775808.0 && f < 9223372036854775808.0;
  v = ok ? __double2ll_rz(f) : 0;
  return ok;
}

// Converts this thread's elements, value bits raw of source type dtype,
// to integers (Go: intValue) and returns the mask of those that do not
// fit [lo, hi] (bit k for element k).
__device__ __forceinline__ u32 to_int(u32 dtype, u32 n, const u64 (&raw)[EPT], long long (&v)[EPT], long long lo,
                                      long long hi) {
  u32 bad = 0;
  switch (dtype) {
    case DAMACY_BOOL:
      EACH(n, v[k] = (raw[k] & 0xff) != 0 ? 1 : 0);
      break;
    case DAMACY_INT8:
      EACH(n, v[k] = (signed char)(u8)raw[k]);
      break;
    case DAMACY_INT16:
      EACH(n, v[k] = (short)(u16)raw[k]);
      break;
    case DAMACY_INT32:
      EACH(n, v[k] = (int)(u32)raw[k]);
      break;
    case DAMACY_INT64:
    case DAMACY_UINT8:
    case DAMACY_UINT16:
    case DAMACY_UINT32:
      EACH(n, v[k] = (long long)raw[k]);
      break;
    case DAMACY_UINT64:
      // Above 2^63-1 no output type holds it; its bits are written as
      // they are.
      EACH(n, v[k] = (long long)raw[k]; bad |= (u32)(v[k] < 0) << k);
      break;
    case DAMACY_FLOAT16:
      EACH(n, bad |= (u32)!float_to_int(__uint_as_float(half_to_float_bits((u32)raw[k] & 0xffff)), v[k]) << k);
      break;
    case DAMACY_FLOAT32:
      EACH(n, bad |= (u32)!float_to_int(__uint_as_float((u32)raw[k]), v[k]) << k);
      break;
    default:  // DAMACY_FLOAT64
      EACH(n, bad |= (u32)!double_to_int(__longlong_as_double((long long)raw[k]), v[k]) << k);
      break;
  }
  EACH(n, bad |= (u32)(v[k] < lo || v[k] > hi) << k);
  return bad;
}

// Makes (mark, value, dtype) the status's first misfit if mark is the
// largest mark so far (the earliest misfit in the batch's order). The mark
// is raised with atomicMax; value and dtype are written under the
// status's lock, and only while the mark read under the lock is still
// this one. The thread that raises the mark last takes the lock after
// every other thread that raised it, so value and dtype end up those of
// the final mark, whatever the order. One lane per warp calls this
// (report), so the spinning never waits on a lane of its own warp.
__device__ __noinline__ void record_first(damacy_misfits* s, u64 mark, u64 value, u32 dtype) {
  if (atomicMax(&s->first, mark) >= mark) {
    return;
  }
  while (atomicCAS(&s->lock, 0u, 1u) != 0u) {
  }
  __threadfence();
  if (*reinterpret_cast<volatile u64*>(&s->first) == mark) {
    *reinterpret_cast<volatile u64*>(&s->value) = value;
    *reinterpret_cast<volatile u32*>(&s->dtype) = dtype;
  }
  __threadfence();
  atomicExch(&s->lock, 0u);
}

// Adds this warp's misfits (this thread's in mask bad) to the status: the
// count with one atomic per warp, the warp's earliest misfit through the
// one lane that holds it. Every lane of the warp must call it.
__device__ __forceinline__ void report(damacy_misfits* s, const op_ctx& c, u32 bad, const u32 (&dst)[EPT],
                                       const u64 (&raw)[EPT]) {
  u64 mark = 0, value = 0;
#pragma unroll
  for (u32 k = 0; k < EPT; k++) {
    const u64 m = ~(((u64)c.op.sample << 32) | dst[k]);
    if (((bad >> k) & 1) != 0 && m > mark) {
      mark = m;
      value = raw[k];
    }
  }
  u64 count = __popc(bad);
  u64 best = mark;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    count += __shfl_xor_sync(0xffffffffu, count, o);
    const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&s->count, count);
  }
  if (mark != 0 && mark == best) {
    record_first(s, mark, value, c.op.src_dtype);
  }
}

// The groups of a block for an integer output: the kernel's loop, with
// the values converted to integers instead of float32 and, when the
// launch has a status, misfits reported. Out of line, so that the float
// loop's code and registers are what they were without it.
__device__ __noinline__ void assemble_ints(const op_ctx& c, u32 first, u32 rank, u64 arena, u64 out_addr,
                                           u32 out_dtype, u64 misfits) {
  long long lo, hi;
  int_range(out_dtype, lo, hi);
  const u32 size = itemsize_of(out_dtype);
  u8* __restrict__ out = reinterpret_cast<u8*>(out_addr) + c.sample_base * size;
  const u8* __restrict__ chunk = reinterpret_cast<const u8*>(arena) + c.op.src_offset;
#pragma unroll 1
  for (u32 g = 0; g < DAMACY_ASSEMBLE_GROUPS; g++) {
    const u32 group = first + g * DAMACY_ASSEMBLE_THREADS * EPT;
    if (group >= c.elems) {
      return;
    }
    u32 src[EPT], dst[EPT];
    long long v[EPT];
    const u32 n = locate_rank(rank, c, group, src, dst);
    if (c.op.src_dtype == DAMACY_FILL) {
      EACH(n, v[k] = (int)c.op.fill);  // sign-extended for INT64
    } else {
      u64 raw[EPT];
      load_elems(chunk, c, n, src, raw);
      const u32 bad = to_int(c.op.src_dtype, n, raw, v, lo, hi);
      // Uniform across the block up to the vote, so every lane is there.
      if (misfits != 0 && __any_sync(0xffffffffu, bad != 0)) {
        report(reinterpret_cast<damacy_misfits*>(misfits), c, bad, dst, raw);
      }
    }
    switch (size) {
      case 1:
        EACH(n, out[dst[k]] = (u8)v[k]);
        break;
      case 2:
        EACH(n, reinterpret_cast<u16*>(out)[dst[k]] = (u16)v[k]);
        break;
      case 4:
        EACH(n, reinterpret_cast<u32*>(out)[dst[k]] = (u32)v[k]);
        break;
      default:
        EACH(n, reinterpret_cast<u64*>(out)[dst[k]] = (u64)v[k]);
        break;
    }
  }
}

#endif
