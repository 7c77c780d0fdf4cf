#!/usr/bin/env bash
# GPU readiness check on one CUDA machine with no network access.
#
#   bench/gpu_check.sh              # the checks; PASS/FAIL per check with tokens/s and peak memory
#   bench/gpu_check.sh --dry-run    # on a CPU: builds a 1-layer stand-in model, collects the checks
#                                   # (they skip without CUDA) and prints the table of what would run
#
# What it checks (tests/gpu/test_gpu_check.py, marker `gpu`), on a random-init
# model of Qwen2.5-0.5B's shape built from a config (tests/gpu/qwen_shape.py):
#   - the learner on DeepSpeed ZeRO-2 and ZeRO-3, full parameters and LoRA, QLoRA if bitsandbytes is there (bf16,
#     gradient checkpointing): tokens/s and peak GPU memory;
#   - vLLM's log-probs against the learner's (<= 0.01, float32) after a weight
#     reload of each kind: full weights (reload_weights) and a LoRA adapter
#     (a LoRARequest per version): reload seconds, bytes, tokens/s;
#   - a few steps of `rlvr-actor up` with examples/gpu_qwen.toml pointed at the model;
#   - weights by collective with NCCL (bench/weights_collective.py, learner on cuda:0, replica
#     receiving on cuda:1) against object_store, when two CUDA devices exist (NCCL refuses two ranks
#     on one device): seconds per sync into $OUT/weights_collective.jsonl;
#   - weights without a file on one GPU (bench/weights_sync.py: the DeepSpeed learner's publish and a
#     vLLM replica's reload, export folder against the in-memory collective, gloo through host
#     memory), with the same path's figures scaled to a 7B model in bf16: $OUT/weights_sync.jsonl.
#
# Environment: PYTHON (default .venv/bin/python), OUT (default runs/gpu_check),
# RLVR_GPU_MODEL (a model folder to reuse instead of building one).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-runs/gpu_check}
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1

layers=24
[[ $DRY == 1 ]] && layers=1
MODEL=${RLVR_GPU_MODEL:-$OUT/qwen05b-shaped-l$layers}
if [[ ! -f "$MODEL/config.json" ]]; then
  echo "building a random Qwen2.5-0.5B-shaped model ($layers layers) in $MODEL"
  "$PY" -m tests.gpu.qwen_shape "$MODEL" --layers "$layers" >/dev/null || { echo "FAIL model build"; exit 1; }
fi
export RLVR_GPU_MODEL=$MODEL
# Weights without a file: two vLLM replicas (one per transport) and the learner share the one GPU.
WSYNC=("$PY" bench/weights_sync.py --config examples/gpu_qwen.toml --model "$MODEL" --repeats 3
       --gpu-memory-utilization 0.25 --out "$OUT/weights_sync.jsonl")

if [[ $DRY == 1 ]]; then
  "$PY" - "$MODEL" <<'EOF' || exit 1
import sys
from transformers import AutoConfig, AutoTokenizer
cfg, tok = AutoConfig.from_pretrained(sys.argv[1]), AutoTokenizer.from_pretrained(sys.argv[1])
assert cfg.vocab_size == len(tok) == 151936, (cfg.vocab_size, len(tok))
print(f"model ok: vocab {cfg.vocab_size}, hidden {cfg.hidden_size}, layers {cfg.num_hidden_layers}")
EOF
  "$PY" -m pytest -q -m gpu tests/gpu --collect-only -p no:cacheprovider | grep "::" | sed 's/^/would run: /'
  "$PY" -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rs | tail -3
  "$PY" bench/weights_sync.py --help >/dev/null || { echo "FAIL bench/weights_sync.py does not start"; exit 1; }
  echo "would run: ${WSYNC[*]}"
  exit 0
fi

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
  || { echo "FAIL no CUDA device (use --dry-run on a CPU)"; exit 1; }
"$PY" -m pytest -m gpu tests/gpu -s -p no:cacheprovider --junitxml="$OUT/gpu_check.xml" \
  -o junit_logging=system-out 2>&1 | tee "$OUT/gpu_check.log"
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.device_count() >= 2 else 1)"; then
  "$PY" bench/weights_collective.py --transports nccl,object_store --device cuda:0 --replica-device cuda:1 \
    --hidden 1024 --layers 8 --out "$OUT/weights_collective.jsonl" 2>&1 | tee "$OUT/weights_collective.log" | tail -1 \
    || echo "FAIL weights_collective nccl (see $OUT/weights_collective.log)"
else
  echo "SKIP weights_collective nccl: needs two CUDA devices"
fi
"${WSYNC[@]}" 2>&1 | tee "$OUT/weights_sync.log" | grep -E "^(A |B |7B)" | sed 's/^/WSYNC /' \
  || echo "FAIL weights_sync (see $OUT/weights_sync.log)"
# The memory plan (rlvr-actor plan, docs/plan.md) for the same model on this GPU, to read beside
# each check's measured peak below: PLAN lines per role, the learner's parts included.
GPU_MEM=$("$PY" -c "import torch; print(f'{torch.cuda.get_device_properties(0).total_memory}B')")
"$PY" -m rlvr.cli.main plan --config examples/gpu_qwen.toml --quiet-config --gpus 1 --gpu-memory "$GPU_MEM" \
  --set "rollout.engine.model=\"$MODEL\"" --set "learn.engine.model_path=\"$MODEL\"" 2>&1 \
  | tee "$OUT/plan.log" | grep -iE "learn|rollout|GiB" | sed 's/^/PLAN /'
"$PY" - "$OUT/gpu_check.xml" <<'EOF'
import re
import sys
import xml.etree.ElementTree as ET

failed = 0
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = case.get("name")
    bad = case.find("failure") is not None or case.find("error") is not None
    skipped = case.find("skipped") is not None
    out = case.findtext("system-out") or ""
    figures = " | ".join(m.group(1) for m in re.finditer(r"^GPUCHECK (.*)$", out, re.M))
    status = "SKIP" if skipped else "FAIL" if bad else "PASS"
    failed += status == "FAIL"
    print(f"{status:4} {name:60} {figures}")
sys.exit(1 if failed else 0)
EOF
