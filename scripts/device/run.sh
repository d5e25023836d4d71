#!/usr/bin/env bash
# Runs a device bundle (built by `cargo xtask device-bundle`) on the GPU machine: every test
# binary, then the GPU benchmarks (BENCH_FILTER="name ..." picks some); logs go to $OUT (the device tool brings them back) and a
# summary table is printed last. Run from the repository root: `bash bundle/run.sh [filter]`.
set -uo pipefail
BUNDLE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BUNDLE/.." && pwd)"
OUT="${OUT:-/tmp/pocket-out}"
FILTER="${1:-}"
# Per-binary logs go to LOGS and come back as one archive (the device tool returns at most 8 files).
LOGS=/tmp/pocket-logs
mkdir -p "$OUT" "$LOGS"

# cudarc resolves libnccl.so by that name; the machine only has the versioned file.
mkdir -p /tmp/pocket-lib
[ -e /usr/lib/x86_64-linux-gnu/libnccl.so.2 ] && ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# Test binaries locate fixtures and sources through the build machine's path (CARGO_MANIFEST_DIR).
if [ ! -e /work/main ]; then mkdir -p /work && ln -s "$ROOT" /work/main; fi
export RUST_BACKTRACE=1

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$LOGS/gpu.txt"

summary=()
for exe in "$BUNDLE"/bin/test-*; do
  name="$(basename "$exe")"
  [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && continue
  [[ "$name" == *cuda_bench* ]] && continue
  start=$(date +%s)
  extra=""; [[ "$name" == *cuda_* ]] && extra="--nocapture"
  "$exe" --test-threads=4 $extra >"$LOGS/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  res=$(grep -E "^test result:" "$LOGS/$name.log" | tail -n 1 | sed 's/test result: //; s/; finished.*//')
  [ $rc -eq 0 ] && status=PASS || status=FAIL
  summary+=("$(printf '%-44s %-4s %4ss  %s' "$name" "$status" "$secs" "$res")")
  if [ $rc -ne 0 ]; then
    grep -E "panicked|FAILED|failed|error" "$LOGS/$name.log" | head -n 30
    # Programmatic dependent launch is on by default on the H200: a failing binary runs again
    # with it off, so the summary says at once whether PDL is the cause.
    POCKET_PDL=0 "$exe" --test-threads=4 $extra >"$LOGS/$name.pdl0.log" 2>&1
    rc0=$?; [ $rc0 -eq 0 ] && status0=PASS || status0=FAIL
    res0=$(grep -E "^test result:" "$LOGS/$name.pdl0.log" | tail -n 1 | sed 's/test result: //; s/; finished.*//')
    summary+=("$(printf '%-44s %-4s %4s   %s' "$name (POCKET_PDL=0)" "$status0" "" "$res0")")
  fi
done

# The generic attention kernel in decode too (POCKET_ATTN=generic), through the attention test.
for exe in "$BUNDLE"/bin/test-*cuda_attention*; do
  [ -e "$exe" ] || continue
  [ -n "$FILTER" ] && [[ "$(basename "$exe")" != *"$FILTER"* ]] && continue
  POCKET_ATTN=generic "$exe" --nocapture >"$LOGS/cuda_attention_generic.log" 2>&1
  rc=$?; [ $rc -eq 0 ] && status=PASS || status=FAIL
  res=$(grep -E "^test result:" "$LOGS/cuda_attention_generic.log" | tail -n 1 | sed 's/test result: //; s/; finished.*//')
  summary+=("$(printf '%-44s %-4s %4s   %s' "cuda_attention (POCKET_ATTN=generic)" "$status" "" "$res")")
done

# The non-default decode GEMVs (POCKET_GEMV=fused: quantize inside the GEMV; POCKET_GEMV=warp:
# a warp per weight row) through the same GEMV reference test.
for variant in fused warp; do
  for exe in "$BUNDLE"/bin/test-*cuda_gemv*; do
    [ -e "$exe" ] || continue
    [ -n "$FILTER" ] && [[ "$(basename "$exe")" != *"$FILTER"* ]] && continue
    POCKET_GEMV=$variant "$exe" --nocapture >"$LOGS/cuda_gemv_$variant.log" 2>&1
    rc=$?; [ $rc -eq 0 ] && status=PASS || status=FAIL
    res=$(grep -E "^test result:" "$LOGS/cuda_gemv_$variant.log" | tail -n 1 | sed 's/test result: //; s/; finished.*//')
    summary+=("$(printf '%-44s %-4s %4s   %s' "cuda_gemv (POCKET_GEMV=$variant)" "$status" "" "$res")")
  done
done

bench_lines=()
for exe in "$BUNDLE"/bin/test-*cuda_bench*; do
  [ -e "$exe" ] || continue
  [ -n "$FILTER" ] && [[ "bench" != *"$FILTER"* ]] && [[ "$(basename "$exe")" != *"$FILTER"* ]] && continue
  log="$LOGS/$(basename "$exe" | sed 's/^test-pocket_kernels-//').log"
  # BENCH_FILTER (space-separated test names) runs only those benchmarks.
  # shellcheck disable=SC2086
  "$exe" --ignored --nocapture --test-threads=1 ${BENCH_FILTER:-} >"$log" 2>&1
  mapfile -t lines < <(grep -E "^(gemv|gemm|attn|step|small|qkv|delta)" "$log" | awk '!seen[$0]++')
  bench_lines+=("${lines[@]}")
done
# Programmatic dependent launch A/B: the decode-step bench again with PDL off (the run above used
# the default), its lines tagged; bench_decode_step_8b_pdl compares both in-process.
for exe in "$BUNDLE"/bin/test-*cuda_bench; do
  [ -e "$exe" ] || continue
  POCKET_PDL=0 "$exe" --ignored --nocapture --test-threads=1 --exact bench_decode_step_8b \
    >"$LOGS/bench_pdl0.log" 2>&1
  mapfile -t lines < <(grep -E "^step" "$LOGS/bench_pdl0.log" | awk '!seen[$0]++' | sed 's/^step/step[POCKET_PDL=0]/')
  bench_lines+=("${lines[@]}")
done

echo
echo "==================== device run summary ===================="
cat "$LOGS/gpu.txt" | tail -n 1
for l in "${summary[@]}"; do echo "$l"; done
for l in "${bench_lines[@]}"; do echo "$l"; done
tar czf "$OUT/logs.tgz" -C /tmp pocket-logs
