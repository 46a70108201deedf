#!/usr/bin/env bash
# Builds and runs emu_check.cpp: bench.cu's kernels on the repo's CPU emulation (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=../..
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
OUT=${TMPDIR:-/tmp}/exp_modulate_emu
${CXX:-g++} -std=c++20 -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -I"$ROOT/tests/cuda_emu" -I"$CUDA_INC" -I. emu_check.cpp "$ROOT/tests/cuda_emu/emu.cpp" -o "$OUT"
ASAN_OPTIONS=detect_leaks=0 "$OUT"
