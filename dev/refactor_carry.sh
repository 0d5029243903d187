#!/usr/bin/env bash
# Packs the two builds dev/refactor_device.sh compares into .carry/ (git-ignored), stripped and
# xz-compressed with the Debian shared libraries the device image lacks:
#   dev/refactor_carry.sh OLD_DIR NEW_BUILD_DIR
# OLD_DIR holds nitro and nitro_logits_dump of the build before the change (a CUDA build, sm_90;
# build its nitro_logits_dump from this checkout's dev/logits_dump.cpp, which freezes residency in
# hybrid runs: copy the file into the old worktree before building, the API it uses is older);
# NEW_BUILD_DIR is the CUDA build directory of the change (nitro, nitro_logits_dump,
# tests/nitro_cuda_tests).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?old binaries dir}; NEW=${2:?new build dir}
mkdir -p .carry
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/old" "$T/new"
cp "$OLD/nitro" "$OLD/nitro_logits_dump" "$T/old/"
cp "$NEW/nitro" "$NEW/nitro_logits_dump" "$NEW/tests/nitro_cuda_tests" "$T/new/"
for d in old new; do
    strip --strip-unneeded "$T/$d"/*
    for lib in libfmt.so.9 libxxhash.so.0 libpcre2-8.so.0 libcpp-httplib.so.0.11; do cp -L "/lib/x86_64-linux-gnu/$lib" "$T/$d/"; done
    XZ_OPT=-9 tar cJf ".carry/$d.tar.xz" -C "$T" "$d"
done
ls -la .carry/old.tar.xz .carry/new.tar.xz
