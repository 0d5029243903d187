#!/usr/bin/env bash
# Installs every dependency nitro needs on Debian 12 and builds it in ./build.
# Safe to re-run: packages already present are not reinstalled, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages (see README "Dependencies" for what each is for).
PKGS=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev libpcre2-dev libcpp-httplib-dev
      nodejs curl
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev)
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

# The server's client tests (tests/server) use the OpenAI Node SDK pinned in its lockfile.
# nodejs from NodeSource ships npm; Debian's nodejs needs the npm package.
if ! command -v npm >/dev/null; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm
fi
npm ci --prefix tests/server --no-audit --no-fund --loglevel=error

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${NITRO_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
