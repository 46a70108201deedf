#!/usr/bin/env bash
# The GPU run (NVIDIA H200 via the device machine): build the CUDA variant with our builder, run the GPU
# correctness suite, compute-sanitizer memcheck on every op, and the op benchmarks. Logs land in $OUT.
# Usage on the GPU machine, from the repo root:  OUT=/tmp/out bash scripts/gpu_check.sh [steps...]
# steps: build tests memcheck bench e2e timeline
# (default: build tests memcheck bench)
set -uo pipefail
OUT=${OUT:-/tmp/hubkernels-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then  # pure-Python packages the GPU image lacks (diffusers)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
steps=${*:-build tests memcheck bench}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"
for step in $steps; do
  echo "==> $step"
  case $step in
    build)    python3 -m hubkernels build . -v > "$OUT/build.log" 2>&1; rc=$?; tail -25 "$OUT/build.log"
              [ $rc -eq 0 ] || exit $rc ;;
    tests)    python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25 ;;
    memcheck) compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
                python3 scripts/sanitize_ops.py > "$OUT/memcheck.log" 2>&1; echo "memcheck exit $?"; tail -15 "$OUT/memcheck.log" ;;
    bench)    python3 -m hubkernels bench --output "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
    e2e)      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 \
                > "$OUT/clocks_e2e.csv" 2>/dev/null & smi=$!
              python3 scripts/ltx_e2e.py --cuda-graphs --warmup 5 --iters 20 --output "$OUT/e2e.json" 2>&1 | tee "$OUT/e2e.log" | tail -30
              kill $smi ;;
    timeline) python3 scripts/ltx_timeline.py --graph 2>&1 | tee "$OUT/timeline.log" | grep -v Warning | tail -60 ;;
  esac
done
