#!/bin/sh
# Splits a CPU profile of a loader reading an object store (damacy bench
# --profile, getload --cpuprofile) into where its time goes: the SDK's
# middleware and signing, the HTTP client, socket reads, copies,
# allocation and the collector, decoding, the scheduler. Each line is the
# samples whose stack has a frame matching the category's pattern (so
# categories overlap: signing is inside the SDK's middleware), as CPU
# seconds, a share of the profile and, given the GB the process read over
# the profile, CPU seconds per GB. Needs Go (go tool pprof); a profile
# carries its own symbols, so the binary is not needed.
#
#   cmd/damacy/peers/profile_split.sh PROFILE [GB_READ]
#
# POSIX sh: `sh profile_split.sh ...` (dash) and bash run it alike.
#
# GB_READ for a damacy bench profile: the report's stats.counters.bytes_read
# / 1e9 (the profile covers the measured batches, as the counters do).
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 PROFILE [GB_READ]" >&2
  exit 2
fi
prof=$1
gb=${2:-}

# seconds PATTERN: the CPU seconds of the stacks with a frame matching
# PATTERN ("" for all): what the nodes shown account for, every node shown.
seconds() {
  if [ -n "$1" ]; then
    out=$(go tool pprof -top -nodecount=1000000 "-focus=$1" "$prof" 2>/dev/null </dev/null) || return 1
  else
    out=$(go tool pprof -top -nodecount=1000000 "$prof" 2>/dev/null </dev/null) || return 1
  fi
  printf '%s\n' "$out" |
    sed -n 's/^Showing nodes accounting for \([0-9.]*\)\([a-zµ]*\),.*/\1 \2/p' | head -1 |
    awk '{ v = $1; u = $2
      if (u == "ms") v /= 1e3; else if (u == "us" || u == "µs") v /= 1e6; else if (u == "min") v *= 60; else if (u == "h") v *= 3600
      printf "%.3f\n", v }'
}

total=$(seconds "") || total=
[ -n "$total" ] || { echo "$0: go tool pprof could not read $prof" >&2; exit 1; }
printf '%-44s %9s %7s %s\n' "category (frame pattern)" "CPU s" "share" "${gb:+CPU s per GB read}"
while IFS='|' read -r name re; do
  [ -n "$name" ] || continue
  s=$(seconds "$re") || { echo "$0: go tool pprof failed on $prof with -focus=$re" >&2; exit 1; }
  s=${s:-0}
  share=$(awk -v s="$s" -v t="$total" 'BEGIN { printf "%.1f%%", (t > 0 ? 100 * s / t : 0) }')
  per=""
  [ -n "$gb" ] && per=$(awk -v s="$s" -v g="$gb" 'BEGIN { printf "%.3f", (g > 0 ? s / g : 0) }')
  printf '%-44s %9.3f %7s %s\n' "$name" "$s" "$share" "$per"
done <<'EOF'
all|
S3 SDK (middleware, signing, deserializing)|aws-sdk-go-v2|smithy-go
  of which SigV4 signing|aws/signer/v4\.
damacy's SigV4 signing (zarr/remote)|damacy/zarr/remote\.\(\*s3Signer\)
  of which hashing (sha256, hmac)|crypto/sha256|crypto/hmac
minio-go client (getload)|minio/minio-go
net/http client (transport, conn reads)|net/http\.
socket reads and writes (syscalls)|internal/poll\.\(\*FD\)\.(Read|Write)|syscall\.(read|write)
copies (memmove)|runtime\.memmove
allocation (mallocgc)|runtime\.mallocgc
garbage collection (background)|runtime\.gcBgMarkWorker
damacy's request layer (zarr/remote)|damacy/zarr/remote\.
CPU decode (zstd, lz4, blosc)|klauspost/compress|pierrec/lz4|damacy/zarr/blosc
assemble and convert (host)|damacy/ptx\.|damacy/internal/plan\.
scheduler and waits (futex, netpoll)|runtime\.(findRunnable|schedule|futex|netpoll)
EOF
