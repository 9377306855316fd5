#!/usr/bin/env bash
# The whole GPU check in one call on a GPU machine: build hal's compiled core for the machine's Python, then
# the Vulkan tests on the GPU's Vulkan driver (push descriptors, then descriptor sets), the CUDA tests, then
# the GPU benchmarks (the build also makes their compiled references, bench/native). Every log and result
# lands in $OUT (default bench/results/gpu-check).
#
# The machine lacks the Vulkan loader and headers, the shader tools and some wheels; they travel with the
# tree (docs/development.md's Notes say how to fetch them): .gl (libvulkan1), .tools (glslc, libshaderc1, spirv-tools,
# libvulkan-dev), .whl (vulkan, cffi, pycparser, and Cython 3 where the machine's is older), .whl-bench
# (matplotlib, tqdm, where the machine lacks them; the lent machines have both). From the repository root, through the device
# tool:
#     bash bench/gpu_check.sh [all|tests|bench|quick|cuda|decode|collectives|parallel]   with carry [".gl", ".tools", ".whl"]
# `tests` runs the test suites, `bench` the benchmark suite (`python -m bench`, whose JSON, report and
# figures land in $OUT too); each fits one 10-minute call, `all` (the default) runs both. `quick` runs the
# test suites, then bench.cuda for 1000 kernels only, bench.vulkan, and bench.indirect and bench.regions on both
# devices (their reports and JSON in $OUT): one call that fits a small lease. `cuda` runs the CUDA tests, bench.cuda
# for 10 kernels (its rebind and new-values rows are the same as at any size), bench.indirect, bench.regions,
# bench.nested, bench.host_calls, bench.transients, bench.decode (with hal on Vulkan and PyTorch beside it), the
# Triton tests of the host's interpreter, bench.triton and bench.calls: the CUDA backend, in about four minutes. `decode` runs
# the decode example's and early launch's tests on CUDA and Vulkan, bench.decode (hal against PyTorch at its best
# and the GPU's floors), bench.decode_timeline, bench.early_launch, `python -m hal trace decode` and
# `python -m hal demo decode`: about four minutes, most of it torch.compile. `collectives` runs the collectives' CUDA tests and bench.collectives,
# `parallel` the split decode's tests and bench.tensor_parallel (NCCL through nccl4py's wheel in .whl; WORLDS=2,4
# runs only those GPU counts and one GPU's, PARTS=hal,torch only those rows, for a long run in parts): each one call
# on a machine with several GPUs.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
case "$PART" in all|tests|bench|quick|cuda|decode|collectives|parallel) ;;
    *) echo "usage: $0 [all|tests|bench|quick|cuda|decode|collectives|parallel]" >&2; exit 2 ;;
esac
OUT=${OUT:-bench/results/gpu-check}
mkdir -p "$OUT"
status=0

for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
mkdir -p /tmp/tools
for f in .tools/*.deb; do dpkg -x "$f" /tmp/tools; done
export PATH="/tmp/tools/usr/bin:$PATH"
export LD_LIBRARY_PATH="/tmp/tools/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
# A Vulkan SDK for the build: libvulkan-dev's headers, and the loader (from .gl) to link against.
mkdir -p /tmp/vulkan-sdk/lib
cp -r /tmp/tools/usr/include /tmp/vulkan-sdk/
ln -sf /usr/lib/x86_64-linux-gnu/libvulkan.so.1 /tmp/vulkan-sdk/lib/libvulkan.so
export VULKAN_SDK=/tmp/vulkan-sdk
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
if ! python3 -c "import matplotlib, tqdm" 2>/dev/null && [ -d .whl-bench ]; then  # the benchmark suite's figures
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl-bench/*.whl
fi
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1  # (a crash prints Python's stack)
if [ ! -e /usr/share/vulkan/icd.d/nvidia_icd.json ] && [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi

# The compiled core, for this machine's Python, in the source tree (the tree is importable from $PWD).
start=$(date +%s)
python3 setup.py -q build_ext --inplace -j 16 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "compiled core built in $(( $(date +%s) - start )) s"

{
    echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 --version
    python3 -c "import cuda.bindings, Cython; print('cuda-bindings', cuda.bindings.__version__, 'Cython', Cython.__version__)"
    python3 -m hal info
    python3 -m hal demo
    python3 -m hal demo --device vulkan
} 2>&1 | tee "$OUT/machine.txt"

run() {  # run LOG TITLE COMMAND...: append the output to $OUT/LOG under TITLE, remember a failure
    local log=$1 title=$2
    shift 2
    echo "## $title" >> "$OUT/$log"
    timeout "${TIMEOUT:-240}" "$@" 2>&1 | tee -a "$OUT/$log" || { status=1; echo "## failed or timed out" >> "$OUT/$log"; }
}

if [ "$PART" = collectives ]; then  # on a machine with several GPUs: the collectives' tests, then bench.collectives
    rm -f "$OUT"/tests-*.log "$OUT"/bench.log
    nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
    run tests-cuda.log "CUDA collectives" env HAL_REQUIRE=cuda python3 -m pytest -q -m cuda -p no:cacheprovider \
        tests/conformance/test_collectives.py tests/cuda_graph/test_collectives.py \
        tests/cuda_graph/test_peer_all_reduce.py
    TIMEOUT=300 run bench.log "python -m bench.collectives" python3 -m bench.collectives --json "$OUT/collectives.json"
    exit $status
fi
if [ "$PART" = parallel ]; then  # on a machine with several GPUs: the split decode's tests, then bench.tensor_parallel
    rm -f "$OUT"/tests-*.log "$OUT"/bench.log
    run tests-cuda.log "the peer all_reduce, the split decode" env HAL_REQUIRE=cuda python3 -m pytest -q -m cuda \
        -p no:cacheprovider tests/cuda_graph/test_peer_all_reduce.py tests/examples/test_decode_parallel.py
    TIMEOUT=500 run bench.log "python -m bench.tensor_parallel" python3 -m bench.tensor_parallel \
        --worlds "${WORLDS:-1,2,4,8}" --parts "${PARTS:-hal,torch,nccl}" --json "$OUT/tensor-parallel.json"
    exit $status
fi
if [ "$PART" = decode ]; then
    rm -f "$OUT"/tests-*.log "$OUT"/bench.log
    run tests-decode.log "decode and early launch tests, CUDA and Vulkan" env HAL_REQUIRE=cuda,vulkan python3 -m \
        pytest -q -p no:cacheprovider tests/examples tests/bench/test_decode_torch.py \
        tests/conformance/test_early_launch.py tests/cuda_graph/test_early_launch.py
    TIMEOUT=420 run bench.log "python -m bench.decode" python3 -m bench.decode --json "$OUT/decode.json"
    TIMEOUT=120 run bench.log "python -m bench.decode_timeline" python3 -m bench.decode_timeline \
        --json "$OUT/decode-timeline.json"
    TIMEOUT=120 run bench.log "python -m bench.early_launch" python3 -m bench.early_launch \
        --json "$OUT/early-launch.json"
    TIMEOUT=60 run bench.log "python -m hal trace decode --device cuda" python3 -m hal trace decode --device cuda \
        --out "$OUT"
    TIMEOUT=60 run bench.log "python -m hal demo decode --device cuda --tokens 256" python3 -m hal demo decode \
        --device cuda --tokens 256
    exit $status
fi
if [ "$PART" = cuda ]; then
    rm -f "$OUT"/tests-*.log "$OUT"/bench.log
    run tests-cuda.log "CUDA" env HAL_REQUIRE=cuda python3 -m pytest -q -m cuda -p no:cacheprovider
    TIMEOUT=240 run bench.log "python -m bench.cuda --sizes 10" python3 -m bench.cuda --sizes 10 --json "$OUT/cuda.json"
    TIMEOUT=120 run bench.log "python -m bench.indirect --device cuda" python3 -m bench.indirect --device cuda \
        --json "$OUT/indirect-cuda.json"
    TIMEOUT=120 run bench.log "python -m bench.regions --device cuda" python3 -m bench.regions --device cuda \
        --json "$OUT/regions-cuda.json"
    TIMEOUT=120 run bench.log "python -m bench.nested --device cuda" python3 -m bench.nested --device cuda \
        --json "$OUT/nested-cuda.json"
    TIMEOUT=120 run bench.log "python -m bench.host_calls --device cuda" python3 -m bench.host_calls --device cuda \
        --json "$OUT/host-calls-cuda.json"
    TIMEOUT=120 run bench.log "python -m bench.transients --device cuda" python3 -m bench.transients --device cuda \
        --json "$OUT/transients-cuda.json"
    TIMEOUT=240 run bench.log "python -m bench.decode" python3 -m bench.decode --json "$OUT/decode.json"
    run tests-cuda.log "Triton on the host (Triton's interpreter)" python3 -m pytest -q -p no:cacheprovider \
        tests/host/test_triton.py
    TIMEOUT=120 run bench.log "python -m bench.triton" python3 -m bench.triton --json "$OUT/triton.json"
    TIMEOUT=180 run bench.log "python -m bench.calls" python3 -m bench.calls --json "$OUT/calls.json"
    exit $status
fi
if [ "$PART" != bench ]; then
    rm -f "$OUT"/tests-*.log
    run tests-vulkan.log "push descriptors" env HAL_REQUIRE=vulkan python3 -m pytest -q -m vulkan -p no:cacheprovider
    run tests-vulkan.log "descriptor sets" env HAL_REQUIRE=vulkan HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR=1 python3 -m pytest \
        -q -m vulkan -p no:cacheprovider
    run tests-cuda.log "CUDA" env HAL_REQUIRE=cuda python3 -m pytest -q -m cuda -p no:cacheprovider
fi
if [ "$PART" = quick ]; then
    rm -f "$OUT"/bench.log
    TIMEOUT=240 run bench.log "python -m bench.cuda --sizes 1000" python3 -m bench.cuda --sizes 1000 \
        --json "$OUT/cuda.json"
    TIMEOUT=180 run bench.log "python -m bench.vulkan" python3 -m bench.vulkan --json "$OUT/vulkan.json"
    for device in cuda vulkan; do
        for bench in indirect regions; do
            TIMEOUT=120 run bench.log "python -m bench.$bench --device $device" python3 -m "bench.$bench" \
                --device "$device" --json "$OUT/$bench-$device.json"
        done
    done
elif [ "$PART" != tests ]; then
    rm -f "$OUT"/bench.log
    start=$(date +%s)
    TIMEOUT=540 run bench.log "python -m bench" python3 -m bench --out "$OUT"
    echo "## python -m bench took $(( $(date +%s) - start )) s" | tee -a "$OUT/bench.log"
fi
exit $status
