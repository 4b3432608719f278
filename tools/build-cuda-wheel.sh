#!/usr/bin/env bash
# tools/build-cuda-wheel.sh OUT_DIR [PYTHON]: gradstream's CUDA wheel, built on a machine
# without a GPU (CUDA 13.0, sm_90: H100/H200), for PYTHON (default python3.12).
#
# The wheel carries two builds of the extension (gradstream/_build.py picks one at import):
#   gradstream/_core.*.so        the CPU build, as `pip install .` makes it;
#   gradstream/_cuda/_core.*.so  the `cuda` feature: candle's CUDA backend, gradstream's own
#                                kernels as sm_90 PTX; it links the driver's libcuda.so.1
#                                and CUDA's cuBLAS and cuRAND.
# On a machine with the driver and PyTorch's nvidia-* packages the CUDA build is loaded
# (no LD_LIBRARY_PATH needed); anywhere else the CPU build, with cuda.is_available() False.
#
# It installs what it needs itself: the CUDA toolkit from PyPI's nvidia-* wheels
# (tools/cuda-toolkit.sh, into CUDA_TOOLKIT_DIR, default ../cuda-toolkit) and maturin/wheel
# into a build venv. PROFILE (default release) picks the cargo profile; CARGO_TARGET_DIR
# defaults to ../gradstream-target. Two release builds take about 30 min on 2 cores.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 OUT_DIR [PYTHON]" >&2
    exit 2
fi
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${2:-python3.12}
PROFILE=${PROFILE:-release}
TOOLKIT=${CUDA_TOOLKIT_DIR:-$ROOT/../cuda-toolkit}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/../gradstream-target}

PYBIN=$(command -v "$PYTHON" || true)
if [[ -z $PYBIN ]] && command -v pyenv >/dev/null; then
    PYBIN=$(pyenv prefix "${PYTHON#python}" 2>/dev/null)/bin/$PYTHON || true
fi
if [[ -z $PYBIN || ! -x $PYBIN ]]; then
    echo "$0: no interpreter '$PYTHON' (pass its path as the second argument)" >&2
    exit 2
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== the CUDA toolkit ($TOOLKIT)"
"$ROOT/tools/cuda-toolkit.sh" "$TOOLKIT"

echo "== a build venv"
"$PYBIN" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --upgrade pip
"$WORK/venv/bin/python" -m pip install -q "maturin>=1.7,<2" wheel
MATURIN=("$WORK/venv/bin/maturin" build --profile "$PROFILE" --interpreter "$PYBIN" --strip
    --manifest-path "$ROOT/Cargo.toml" --no-default-features)

echo "== the CPU build"
"${MATURIN[@]}" --features avx512,extension-module --out "$WORK/cpu"

echo "== the CUDA build"
(
    # shellcheck disable=SC1091
    source "$TOOLKIT/env.sh"
    # No auditwheel repair: it would look for the driver's libcuda.so.1 here, and the CUDA
    # libraries are the nvidia-* packages' (gradstream/_build.py loads both at import).
    "${MATURIN[@]}" --features avx512,extension-module,cuda --auditwheel skip --out "$WORK/cuda"
)

echo "== one wheel of both"
"$WORK/venv/bin/python" -m wheel unpack "$WORK"/cpu/*.whl -d "$WORK/tree"
tree=$(echo "$WORK"/tree/*)
mkdir -p "$tree/gradstream/_cuda"
unzip -q -j "$WORK"/cuda/*.whl 'gradstream/_core*.so' -d "$tree/gradstream/_cuda"
# The version's local label says which CUDA it was built for: 0.1.0+cu130.
info=$(echo "$tree"/*.dist-info)
version=$(sed -n 's/^Version: //p' "$info/METADATA")
sed -i "s/^Version: .*/Version: $version+cu130/" "$info/METADATA"
mv "$info" "${info/-$version.dist-info/-$version+cu130.dist-info}"
"$WORK/venv/bin/python" -m wheel pack "$tree" -d "$OUT"
ls -l "$OUT"/*.whl
