#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run (a lent GPU machine's time is short), results under $OUT:
#   1. tests/consumer/test_device.py (the CUDA delivery path, derivations on the device)
#   2. consumer_read.py train_wait_cuda: the wait per step with the step on the GPU
#   3. end_to_end.py --device cuda: the headline sweep with the trainer on the GPU (T = 2 cores)
#   4. consumer_read.py train_wait and labels on the same machine (its CPU figures beside the GPU ones)
# Usage (repository root): OUT=/some/dir benchmarks/gpu_checks.sh
# A GPU machine without a package registry needs wheels of what its image lacks (its own torch stays): on a machine
# with one, `echo /.whl/ >> .git/info/exclude` and
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     torchdata==0.11.0 google-crc32c==1.9.0 webdataset==1.0.2 braceexpand simplejpeg
# then carry .whl along; this script installs them when `import torchdata` fails. About 6 minutes on an H200 machine
# (2026-11-27: 16 cores, torch 2.11.0+cu130); each step has its own time limit, so one that hangs costs only its own.
set -u
OUT=${OUT:?set OUT to a folder for the results}
export PYTHONUNBUFFERED=1
if ! python3 -c "import torchdata, google_crc32c, webdataset" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    nproc
    python3 -c "import torch, torchdata; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'torchdata', torchdata.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
step() {  # step NAME SECONDS COMMAND...: one check, its time limit, its log
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s) $(date -u +%T)"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    echo "=== $name: exit ${PIPESTATUS[0]} $(date -u +%T)"
}
step test_device 90 python3 -m pytest -q -p no:randomly tests/consumer/test_device.py
step train_wait_cuda 120 python3 benchmarks/consumer_read.py --only train_wait_cuda --rounds 3 --out "$OUT/consumer_read.json"
step e2e_gpu 250 python3 benchmarks/end_to_end.py --device cuda --trainer-cores 2 --no-gate --sweep-only --no-shared \
    --no-ray --rounds 1 --results-dir "$OUT"
step train_wait_cpu 70 python3 benchmarks/consumer_read.py --only train_wait --rounds 3 --out "$OUT/consumer_read.json"
step labels 50 python3 benchmarks/consumer_read.py --only labels --rounds 5 --out "$OUT/consumer_read.json"
ls -la "$OUT"
