#!/usr/bin/env bash
# The GPU host's full check, in one command (copied to .gpu/check.sh by
# `make gpu-bins`): every package's tests (run.sh), one compute-sanitizer
# memcheck of the CUDA engine's tests, and the benchmark scenarios with a
# trace of the first. Results go to $OUT (or /tmp): gpu-summary.txt,
# gpu-tests.log, sanitizer.log, bench-*.txt, trace.json.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
"$root/.gpu/run.sh"
status=$?
for f in "$root"/.gpu/nvcomp/libnvcomp.so.*; do
  [ -e "$f" ] && export DAMACY_NVCOMP="$f"
done
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$san" ]; then
  (cd "$root/pipeline" && timeout 300 "$san" --tool memcheck --leak-check full \
    "$root/.gpu/pipeline.test" -test.run 'TestCUDAEngine(MatchesHost|Fixtures|Redo)|TestChunkCacheCUDAEpochs|TestMappedFilesCUDA' -test.v) >"$out/sanitizer.log" 2>&1
  echo "== compute-sanitizer (exit $?)"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|^(ok|FAIL|PASS)" "$out/sanitizer.log"
fi
trace=(--trace "$out/trace.json")
for s in ${DAMACY_BENCH:-throughput blosc-zstd blosc-lz4}; do
  "$root/.gpu/damacy" bench "${trace[@]}" --data "/tmp/damacy-bench-$s" "$s" >"$out/bench-$s.txt" 2>&1
  echo "== bench $s (exit $?)"
  grep -E "^(throughput|engine|lowest|chunks)" "$out/bench-$s.txt"
  trace=()
done
exit $status
