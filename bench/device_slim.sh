#!/usr/bin/env bash
# Room for the binaries in a device call. A call carries the working tree (tracked files and
# untracked files git does not ignore) plus the `carry` paths, 64 MiB in all; the tracked files
# are about 58 MiB, so .carry/bin.tar.xz (about 7 MiB) does not fit beside them. `on` takes large
# test data out of the index and ignores it locally (the files stay on disk): qwen3next's GGUF
# fixture and the router traces, which the kernel, attention and CPU device scripts do not read
# (report_device.sh's replay scenarios do: leave it off for those). `off` puts them back, `status`
# prints what a call would carry now.
#   bash bench/device_slim.sh on|off|status [CARRY_PATH...]
# Between `on` and `off` the index shows those files as deleted: never commit then (`on` warns,
# `status` says so). On the device the tests that read them fail (CudaQwen3Next's fixture file).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=(tests/data/qwen3next/tiny-qwen3next-q8.gguf bench/traces/qwen3-30b-a3b.nmtr bench/traces/gpt-oss-120b.nmtr
       bench/traces/gpt-oss-20b.nmtr)
EX=$(git rev-parse --git-path info/exclude)
BEGIN="# device_slim.sh: begin" END="# device_slim.sh: end"
slimmed() { grep -qxF "$BEGIN" "$EX" 2>/dev/null; }
size() {  # bytes a call would carry: the working tree as git sees it, plus the carry paths given
    { git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1
      for p in "$@"; do du -sb "$p" | cut -f1; done; } | awk '{s += $1} END {printf "%.1f MiB\n", s / 1048576}'
}
case "${1:-status}" in
on)
    slimmed && { echo "device_slim: already on"; exit 0; }
    mkdir -p "$(dirname "$EX")"
    { echo "$BEGIN"; for f in "${FILES[@]}"; do echo "/$f"; done; echo "$END"; } >> "$EX"
    git rm -q --cached -- "${FILES[@]}"
    shift
    echo "device_slim: on; a call carries $(size "$@") (limit 64 MiB). Do not commit until: bash bench/device_slim.sh off"
    ;;
off)
    slimmed || { echo "device_slim: already off"; exit 0; }
    git reset -q -- "${FILES[@]}"
    sed -i "/^$BEGIN\$/,/^$END\$/d" "$EX"
    echo "device_slim: off; the index has the files again"
    ;;
status)
    shift || true
    if slimmed; then echo "device_slim: ON (do not commit)"; else echo "device_slim: off"; fi
    echo "a call carries $(size "$@") (limit 64 MiB)"
    ;;
*)
    echo "usage: bash bench/device_slim.sh on|off|status [CARRY_PATH...]" >&2
    exit 2
    ;;
esac
