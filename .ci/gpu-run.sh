#!/usr/bin/env bash
# Runs the test binaries that `make gpu-bins` cross-built, on a GPU host that
# has no Go. Usage, from the repository root:
#   .gpu/run.sh [PKG...] [-- extra test flags]
# Each binary runs in its package directory (so testdata/ resolves) with
# -test.v; the full log goes to $OUT/gpu-tests.log when OUT is set, and one
# summary line per package is printed at the end.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
gpu="$root/.gpu"
log=${OUT:-/tmp}/gpu-tests.log
: >"$log"

# make gpu-bins ships the binaries gzipped; unpack them once.
for z in "$gpu"/*.gz; do
  [ -e "$z" ] || continue
  gunzip -f "$z" && chmod +x "${z%.gz}"
done

if [ -z "${DAMACY_NVCOMP:-}" ]; then
  for f in "$gpu"/nvcomp/libnvcomp.so.*; do
    [ -e "$f" ] && export DAMACY_NVCOMP="$f"
  done
fi

# The consumer tests (torch, numpy) use the host's python3; on a GPU host the
# GPU tests must run, not skip.
export DAMACY_PYTHON=${DAMACY_PYTHON:-$(command -v python3)}
export DAMACY_REQUIRE_GPU=${DAMACY_REQUIRE_GPU:-1}

want=(); extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  want+=("$1"); shift
done

summary=()
status=0
while read -r name dir; do
  if [ ${#want[@]} -gt 0 ] && ! printf '%s\n' "${want[@]}" | grep -qx "$name"; then continue; fi
  bin="$gpu/$name.test"
  [ -x "$bin" ] || continue
  start=$(date +%s.%N)
  out=$(cd "$root/$dir" && "$bin" -test.v -test.count=1 "${extra[@]}" 2>&1)
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  { echo "=== package $name (exit $rc)"; echo "$out"; } >>"$log"
  pass=$(grep -c -- '^--- PASS' <<<"$out" || true)
  fail=$(grep -c -- '^--- FAIL' <<<"$out" || true)
  skip=$(grep -c -- '^--- SKIP' <<<"$out" || true)
  word=ok; [ $rc -eq 0 ] || { word=FAIL; status=1; }
  summary+=("$(printf '%-4s %-20s %6ss  pass %d  fail %d  skip %d' "$word" "$name" "$secs" "$pass" "$fail" "$skip")")
done <"$gpu/packages.txt"

echo "== summary (log: $log)"
printf '%s\n' "${summary[@]}" | tee "${OUT:-/tmp}/gpu-summary.txt"
exit $status
