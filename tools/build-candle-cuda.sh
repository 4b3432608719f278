#!/usr/bin/env bash
# tools/build-candle-cuda.sh OUT_DIR: the bench's candle program (benches/candle) with its
# `cuda` feature (CUDA 13.0, sm_90: H100/H200), built on a machine without a GPU, stripped,
# as OUT_DIR/candle-bench.
#
# The GPU machine has no Rust. Build into the wheel's folder and tools/gpu-check.sh finds it
# (WHEEL_DIR/candle-bench), or pass it yourself:
#   tools/build-cuda-wheel.sh dist-cuda && tools/build-candle-cuda.sh dist-cuda
#   python -m gradstream.bench --device cuda --candle-bin dist-cuda/candle-bench
# It links the driver's libcuda.so.1 and CUDA's cuBLAS, cuBLASLt and cuRAND; the bench puts
# the library folders of PyTorch's nvidia-* packages (site-packages/nvidia/cu13/lib) on the
# LD_LIBRARY_PATH of the candle process only.
#
# The toolkit comes from tools/cuda-toolkit.sh (into CUDA_TOOLKIT_DIR, default ../cuda-toolkit),
# whose driver stub is made from the cudarc of gradstream's Cargo.lock: this checks that the
# candle program locks the same one. CARGO_TARGET_DIR defaults to ../candle-cuda-target. The
# first build takes about 30 min on 2 cores.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLKIT=${CUDA_TOOLKIT_DIR:-$ROOT/../cuda-toolkit}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/../candle-cuda-target}
MANIFEST=$ROOT/benches/candle/Cargo.toml

# The cudarc each lock file pins (the one that candle-core depends on).
cudarc_of() {
    awk '/^\[\[package\]\]/ { name = "" } /^name = / { name = $3 } \
         name == "\"candle-core\"" && /"cudarc / { gsub(/[",]/, ""); print $2 }' "$1"
}
main_cudarc=$(cudarc_of "$ROOT/Cargo.lock")
candle_cudarc=$(cudarc_of "$ROOT/benches/candle/Cargo.lock")
if [[ -z $main_cudarc || $main_cudarc != "$candle_cudarc" ]]; then
    echo "$0: candle-core's cudarc is '$candle_cudarc' in benches/candle/Cargo.lock but" \
        "'$main_cudarc' in Cargo.lock: the driver stub of tools/cuda-toolkit.sh follows the" \
        "latter (cargo update -p cudarc --precise $main_cudarc in benches/candle)" >&2
    exit 1
fi

echo "== the CUDA toolkit ($TOOLKIT)"
"$ROOT/tools/cuda-toolkit.sh" "$TOOLKIT"

echo "== candle-bench with cuda (cudarc $candle_cudarc, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
(
    # shellcheck disable=SC1091
    source "$TOOLKIT/env.sh"
    cargo build --release --locked --features cuda --manifest-path "$MANIFEST"
)

strip -o "$OUT/candle-bench.tmp" "$CARGO_TARGET_DIR/release/candle-bench"
mv "$OUT/candle-bench.tmp" "$OUT/candle-bench"

# What it needs at run time: the driver, CUDA's libraries from the nvidia-* packages, and
# the system's C runtime. Anything else would not be on the GPU machine.
needed=$(readelf -d "$OUT/candle-bench" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort)
echo "NEEDED: ${needed//$'\n'/ }"
unexpected=$(echo "$needed" | grep -vxE \
    'libcuda\.so\.1|libcublas(Lt)?\.so\.13|libcurand\.so\.10|libnvrtc\.so\.13|lib(c|m|gcc_s|dl|pthread|rt)\.so\.[0-9]+|ld-linux-x86-64\.so\.2' ||
    true)
if [[ -n $unexpected ]]; then
    echo "$0: unexpected NEEDED libraries: $unexpected" >&2
    exit 1
fi
ls -l "$OUT/candle-bench"
