#!/usr/bin/env bash
# The GPU check in one command, from the repository root, on a machine with no network:
#   make gpu-wheels                  # beforehand, where PyPI is reachable: .whl/ (<= 60 MiB)
#   bench/gpu_check.sh               # on the GPU machine: writes bench/RESULTS-gpu.md
#   bench/gpu_check.sh --report F    # elsewhere (CPU: --report or GPU_CHECK_REPORT required)
# The wheels in .whl/ go into a folder of their own (GPU_CHECK_SITE, default /tmp/gpu-check-site)
# on PYTHONPATH, without an index or dependency resolution; nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
SITE="${GPU_CHECK_SITE:-/tmp/gpu-check-site}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
shopt -s nullglob
wheels=(.whl/*.whl)
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ((${#wheels[@]})) && [[ "$pyver" != 3.12 ]]; then
  echo "the wheels in .whl/ are for Python 3.12 and $PY is $pyver: using its own packages"
elif ((${#wheels[@]})); then
  stamp=$(basename -a "${wheels[@]}")  # reinstall when the wheels change
  if [[ "$(cat "$SITE/.installed" 2>/dev/null)" != "$stamp" ]]; then
    if [[ -f "$SITE/.installed" ]]; then
      rm -rf "$SITE"  # ours, from other wheels
    elif [[ -d "$SITE" && -n "$(ls -A "$SITE")" ]]; then
      echo "error: $SITE holds files this script did not install; remove it or set GPU_CHECK_SITE" >&2
      exit 1
    fi
    echo "installing ${#wheels[@]} wheels from .whl/ into $SITE (no index, no dependencies)"
    if "$PY" -m pip --version >/dev/null 2>&1; then
      "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}"
    else  # no pip: a wheel is a zip of the import tree (these carry no .data/ but scripts)
      "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
        "$SITE" "${wheels[@]}"
    fi
    echo "$stamp" >"$SITE/.installed"
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" bench/gpu_check.py "$@"
