#!/usr/bin/env bash
# Installs one SGLang version (no deps + the minimal set in requirements/<ver>.txt) into
# target/conformance-venv-<ver>, or into $CONFORMANCE_VENV if set. Idempotent: skips when
# the venv already imports the pinned version.
set -euo pipefail
ver="${1:-0.5.23}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
req="$here/requirements/$ver.txt"
[ -f "$req" ] || { echo "install.sh: no pinned requirements for SGLang $ver ($req)" >&2; exit 2; }
venv="${CONFORMANCE_VENV:-$root/target/conformance-venv-$ver}"
py="$venv/bin/python"
if [ -x "$py" ] && "$py" -c "import importlib.metadata as m,sys; sys.exit(m.version('sglang')!='$ver')" 2>/dev/null; then
  echo "install.sh: $venv already has sglang $ver"; exit 0
fi
python3 -m venv "$venv"
"$py" -m pip install -q --upgrade pip
# sglang's declared deps pull CUDA torch (~4.8 GB); the harness only needs its pure-Python parts.
"$py" -m pip install -q --no-deps "sglang==$ver"
grep -v -E '^(#|sglang==|$)' "$req" | xargs -r "$py" -m pip install -q 2>&1 | { grep -v -E "^(sglang [0-9.]+ requires|ERROR: pip.s dependency resolver)" || true; }
echo "install.sh: installed sglang $ver into $venv"
