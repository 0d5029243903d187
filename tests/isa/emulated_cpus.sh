#!/usr/bin/env bash
# nitro on CPUs this host is not: qemu-x86_64 (user mode, QEMU 7.2 TCG) emulates an AVX2 CPU
# without AVX-512 (Haswell) and an SSE4.2 CPU without AVX (Nehalem). On each, nitro must
#   1. start (no instruction of a higher level before dispatch: the SIGILL of issue 20),
#   2. choose the best kernel level that CPU has (`nitro --version`: avx2 / scalar),
#   3. generate exactly what that level generates natively (NITRO_ISA=avx2 / scalar on this host,
#      or under `qemu -cpu max` when this host lacks the level): same token ids and the same
#      top-3 probabilities to every printed digit. The kernels are deterministic and qemu
#      implements IEEE arithmetic exactly, so any difference is a dispatch or emulation bug.
# And a build compiled for AVX2 (the probe cpu_baseline_probe, -mavx2 -mfma -mf16c) must refuse
# to start on the SSE4.2 CPU with a message naming what is missing, and start on the AVX2 CPU.
# Usage: emulated_cpus.sh NITRO_BINARY BASELINE_PROBE
set -euo pipefail
nitro="$1"
probe="$2"
qemu=$(command -v qemu-x86_64 || true)
[ -n "$qemu" ] || { echo "FAIL: qemu-x86_64 not found (Debian package qemu-user; scripts/setup.sh installs it)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nitro-isa-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# TCG prints a warning per CPUID feature it cannot model; drop those lines only.
q() { local cpu="$1"; shift; "$qemu" -cpu "$cpu" "$@" 2> >(grep -v '^qemu-x86_64: warning: TCG' >&2); }
fail() { echo "FAIL: $*"; exit 1; }

gen=(run -p "def read_config(path):" -n 12 -t 2 --json --n-probs 3)
ids_probs() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const d=JSON.parse(s);console.log(JSON.stringify({ids:d.ids,probs:d.probs}))})'; }
native_levels=$("$nitro" --version | sed -n 's/^kernels: .*this CPU can run: \([a-z0-9 ]*\).*/\1/p')

for pair in Haswell:avx2 Nehalem:scalar; do
    cpu=${pair%%:*}
    level=${pair##*:}
    v=$(q "$cpu" "$nitro" --version) || fail "nitro --version on an emulated $cpu exited with $?"
    grep -q "^kernels: $level " <<<"$v" || fail "on an emulated $cpu nitro chose '$(grep '^kernels' <<<"$v")', expected $level"
    q "$cpu" "$nitro" "${gen[@]}" | ids_probs > "$tmp/$cpu.json" || fail "nitro run on an emulated $cpu failed"
    if grep -qw "$level" <<<"$native_levels"; then
        where="natively with NITRO_ISA=$level"
        NITRO_ISA=$level "$nitro" "${gen[@]}" | ids_probs > "$tmp/ref.json"
    else
        where="under qemu -cpu max with NITRO_ISA=$level"
        NITRO_ISA=$level q max "$nitro" "${gen[@]}" | ids_probs > "$tmp/ref.json"
    fi
    cmp -s "$tmp/$cpu.json" "$tmp/ref.json" || {
        echo "emulated $cpu: $(cat "$tmp/$cpu.json")"; echo "$where: $(cat "$tmp/ref.json")"
        fail "generation on an emulated $cpu differs from the $level kernels $where"; }
    echo "ok: emulated $cpu: starts, chooses $level kernels, generates what $level generates $where"
done

out=$(q Nehalem "$probe" 2>&1) && fail "the AVX2 build started on an emulated Nehalem (no AVX2): $out"
grep -q "does not have: avx avx2 fma f16c" <<<"$out" || fail "unexpected refusal message on Nehalem: $out"
q Haswell "$probe" >/dev/null || fail "the AVX2 build did not start on an emulated Haswell (AVX2)"
echo "ok: a build compiled for AVX2 refuses to start without AVX2 ('$(head -n1 <<<"$out")') and starts with it"
