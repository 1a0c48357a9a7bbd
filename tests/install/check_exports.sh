#!/usr/bin/env bash
# Fails when libkvflash.so exports a symbol outside the public API: the C functions (kvflash_*)
# and the C++ API (namespaces kvflash and kvflash::gpu, with their type information; never the
# backends' kvflash::cpu and kvflash::cuda). Prints the count of exported
# symbols and every offender.
#   tests/install/check_exports.sh build/<preset>/src/libkvflash.so
set -euo pipefail
lib=$1
# Defined dynamic symbols, demangled: "<value> <type> <name>"; the name may contain spaces.
symbols=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-)
if [ -z "$symbols" ]; then
  echo "check_exports: $lib exports nothing" >&2
  exit 1
fi
allowed='^(kvflash_[A-Za-z0-9_]+$|kvflash::|(typeinfo|typeinfo name|vtable) for kvflash::)'
# The backends' namespaces are internal (kvflash::cpu, kvflash::cuda): never exported.
internal='^((typeinfo|typeinfo name|vtable) for )?kvflash::(cpu|cuda)::'
bad=$( (grep -Ev "$allowed" <<<"$symbols"; grep -E "$internal" <<<"$symbols") || true)
count=$(wc -l <<<"$symbols")
if [ -n "$bad" ]; then
  echo "check_exports: $lib exports $(wc -l <<<"$bad") of $count symbols outside the API:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "check_exports: $count symbols, all kvflash_* or kvflash::"
