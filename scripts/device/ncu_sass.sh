#!/usr/bin/env bash
# Nsight Compute on single one-row FP8 GEMV launches, down to the SASS instruction: for each
# kernel and shape, one launch past the bench's warm-up, with the clocks left alone and caches
# flushed, then two text pages from the report: the details (speed of light, occupancy, warp
# states, source counters' top stalls) and the per-instruction SASS table (CSV: stall samples
# per instruction), which says where the warps wait (the activation loads, the weight loads'
# first use, the products).
#
#   NCU_KERNELS="n1d6 n1d" NCU_SHAPES="5120x6144 5120x17408" bash bundle/ncu_sass.sh
#
# Needs the bundle's cuda_bench_fp8 test binary (bench_fp8_gemv_27b filtered to one shape by
# POCKET_BENCH_FP8_SHAPES). Output: $OUT/ncu/<kernel>-<shape>.{details,sass.csv}.txt.
# Other kernels and benches: NCU_BIN (test binary name), NCU_TEST (its bench) and NCU_NAME (the
# kernel name, %s replaced by each of NCU_KERNELS), e.g. the 8B Q4_0 dp4a GEMVs (the first shape
# the bench runs each at; NCU_SHAPES then only labels the output):
#   NCU_BIN=cuda_bench_decode NCU_TEST=bench_gemv_split_shapes NCU_NAME="gemv_q8r%s_q4_0" \
#     NCU_KERNELS="64" NCU_SHAPES=first bash bundle/ncu_sass.sh
set -u
BUNDLE="${BUNDLE:-$(cd "$(dirname "$0")" && pwd)}"
OUT="${OUT:-/tmp/out}"
NCU="${NCU:-/usr/local/cuda/bin/ncu}"
mkdir -p "$OUT/ncu" /tmp/pocket-lib /tmp/ncu
export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BIN="$BUNDLE/bin/test-pocket_kernels-${NCU_BIN:-cuda_bench_fp8}"
TEST="${NCU_TEST:-bench_fp8_gemv_27b}"
for shape in ${NCU_SHAPES:-5120x6144}; do
  for k in ${NCU_KERNELS:-n1d6}; do
    # shellcheck disable=SC2059
    name="$(printf "${NCU_NAME:-gemv_fp8_e4m3_b_%s}" "$k")"
    rep="/tmp/ncu/$k-$shape"
    # Skip the 5 warm-up launches of that kernel at that shape; profile the sixth.
    POCKET_BENCH_FP8_SHAPES="$shape" timeout "${NCU_TIMEOUT:-240}" "$NCU" \
      --kernel-name "regex:^${name}\$" --launch-skip 5 --launch-count 1 \
      --clock-control none --cache-control all --set full --import-source no -f -o "$rep" \
      "$BIN" --ignored --exact "$TEST" --nocapture >"$OUT/ncu/$k-$shape.run.txt" 2>&1
    "$NCU" --import "$rep.ncu-rep" --page details --print-units base \
      >"$OUT/ncu/$k-$shape.details.txt" 2>&1
    "$NCU" --import "$rep.ncu-rep" --page source --print-source sass --csv \
      >"$OUT/ncu/$k-$shape.sass.csv.txt" 2>&1
    echo "$k $shape: $(grep -m1 -E 'Duration' "$OUT/ncu/$k-$shape.details.txt" | tr -s ' ')"
  done
done
