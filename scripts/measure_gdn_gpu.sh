#!/usr/bin/env bash
# GDNCore on a CUDA GPU in one go, in the order a short GPU session needs it: correctness on each code path, then
# speed side by side with vLLM's and fla-core's kernels (both used when importable, neither a dependency).
#
#   scripts/measure_gdn_gpu.sh OUT_DIR [PATHS]      (from the repository root; PATHS default native,mma)
#
# PATHS are lab/turing_paths.py's: native, mma (the Turing proxy with TensorCore75), fma (the proxy with
# Triton's FMA dots: vLLM's kernels autotune for about 13 minutes there, so leave it to a run of its own). Writes
# OUT_DIR/tests.txt, OUT_DIR/tb/<path>.json and turing-gdn.md (benchmarks/turing_bench.py; tb68/ and
# turing-gdn-68sms.md the same on 68 SMs, lab/sm_limit.py), breakdown.json and
# breakdown.txt (benchmarks/gdn_breakdown.py --sweep), gdn-bench.md (benchmarks/gdn_bench.py --quick --sweep, native)
# and prints which steps failed. The kernel tests need torch and Triton only (no daemon dependencies).
set -u
out=${1:?usage: scripts/measure_gdn_gpu.sh OUT_DIR [PATHS]}
paths=${2:-native,mma}
mkdir -p "$out/tb"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=()

for path in ${paths//,/ }; do
  echo "== kernel tests, $path path" | tee -a "$out/tests.txt"
  kernel_path=$path
  [ "$path" = native ] && kernel_path=
  CAOVAN_KERNEL_PATH=$kernel_path python3 -m pytest tests/kernels --confcutdir=tests/kernels \
    -p tests.support.random_inputs -p no:cacheprovider -q -rf >>"$out/tests.txt" 2>&1 || failed+=("tests/$path")
  tail -n 3 "$out/tests.txt"
done

echo "== GDN prefill end to end, decode and verify steps (benchmarks/turing_bench.py)"
python3 benchmarks/turing_bench.py --only gdn --paths "$paths" --work-dir "$out/tb" --out "$out/turing-gdn.md" \
  || failed+=(turing_bench)

echo "== the same on a 2080 Ti's 68 SMs (a CUDA green context; benchmarks/turing_bench.py --sms 68)"
mkdir -p "$out/tb68"
python3 benchmarks/turing_bench.py --only gdn --paths "$paths" --sms 68 --work-dir "$out/tb68" \
  --out "$out/turing-gdn-68sms.md" || failed+=(turing_bench_68sms)

echo "== GDN prefill, kernel by kernel with launch-shape sweep (benchmarks/gdn_breakdown.py)"
python3 benchmarks/gdn_breakdown.py --paths "$paths" --sweep --out "$out/breakdown.json" >"$out/breakdown.txt" 2>&1 \
  || failed+=(gdn_breakdown)

if [[ ",$paths," == *,native,* ]]; then
  echo "== decode and verify with fla-core beside, and the decode block sweep at B=1, 2, 64, native (benchmarks/gdn_bench.py)"
  python3 benchmarks/gdn_bench.py --quick --sweep --out "$out/gdn-bench.md" || failed+=(gdn_bench)
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]} (see $out)"
  exit 1
fi
echo "all steps passed; results in $out"
