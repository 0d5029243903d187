#!/usr/bin/env bash
# Compares two builds' logits byte for byte (dev/logits_dump.cpp): the check of a restructuring
# that must not change arithmetic. Runs both dump tools on every model given, at every engine
# mode given, and fails at the first difference.
#   dev/compare_logits.sh OLD_DUMP NEW_DUMP "cpu gpu hybrid:0.1 hybrid:0.5" MODEL.gguf...
set -euo pipefail
old="$1"; new="$2"; modes="$3"; shift 3
tmp="$(mktemp -d "${TMPDIR:-/tmp}/nitro-logits-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
status=0
for model in "$@"; do
  for m in $modes; do
    mode="${m%%:*}"; res=""
    [ "$mode" != "$m" ] && res="--resident ${m#*:}"
    "$old" "$model" "$tmp/old.bin" --mode "$mode" $res > "$tmp/old.txt" 2>&1 || { echo "FAIL old: $model $m"; cat "$tmp/old.txt"; status=1; continue; }
    "$new" "$model" "$tmp/new.bin" --mode "$mode" $res > "$tmp/new.txt" 2>&1 || { echo "FAIL new: $model $m"; cat "$tmp/new.txt"; status=1; continue; }
    if cmp -s "$tmp/old.bin" "$tmp/new.bin"; then
      echo "same  $(basename "$model") $m ($(stat -c %s "$tmp/new.bin") bytes)"
    else
      echo "DIFF  $(basename "$model") $m"; diff "$tmp/old.txt" "$tmp/new.txt" || true; status=1
    fi
  done
done
exit $status
