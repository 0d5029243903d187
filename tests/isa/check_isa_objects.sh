#!/usr/bin/env bash
# Fails if an ISA-specific object file (src/cpu/*_avx2.cpp, *_avx512.cpp, compiled with -mavx2 /
# -mavx512*) could run its instructions before kernel dispatch has checked the CPU:
#   - a static initialiser (.init_array / .ctors / .preinit_array section): runs at load time on
#     every CPU (the SIGILL of issue 20: a table built by a constructor in an AVX-512 file);
#   (a weak DW.ref.__gxx_personality_v0 is exception-handling data, not code, and is allowed)
#   - a weak or global definition other than the kernel table's fill_* function: an inline or
#     template function (std:: included) instantiated there is a COMDAT copy that the linker may
#     pick for calls from baseline code, which then run AVX-512 instructions on any CPU.
# Usage: check_isa_objects.sh OBJECT...   (prints what it found; exit 1 on the first bad object)
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 OBJECT..." >&2; exit 2; }
status=0
for obj in "$@"; do
    [ -f "$obj" ] || { echo "FAIL: $obj: no such object file" >&2; exit 1; }
    sections=$(readelf -SW "$obj" | grep -oE '\.(init_array|ctors|preinit_array)[^ ]*' | sort -u || true)
    if [ -n "$sections" ]; then
        echo "FAIL: $obj has load-time code sections: $sections" >&2
        nm -C "$obj" | grep -E '_GLOBAL__sub_I|static initialization' >&2 || true
        status=1
    fi
    # Defined symbols visible outside the object: T/D/B/R (global), W/V (weak), u (unique), i (ifunc).
    bad=$(nm -C --defined-only "$obj" | awk '$2 ~ /^[TDBRWVui]$/ { $1 = ""; print }' \
          | grep -vE '^ T nitro::cpu::kernels::fill_[a-z0-9_]+\(nitro::cpu::kernels::Table&\)$' | grep -vE '^ V DW\.ref\.' || true)
    if [ -n "$bad" ]; then
        echo "FAIL: $obj defines symbols other code may call (only nitro::cpu::kernels::fill_*(Table&) may be external;" >&2
        echo "      put helpers in an anonymous namespace, or make them constexpr/always inline):" >&2
        echo "$bad" | sed 's/^/      /' >&2
        status=1
    fi
    [ $status -eq 0 ] && echo "ok: $(basename "$obj"): no load-time code, only fill_* exported"
done
exit $status
