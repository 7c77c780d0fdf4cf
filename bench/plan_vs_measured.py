"""The learner's memory plan (``rlvr.cli.plan.memory.learner_plan``) against DeepSpeed's measured
peak, on CPU, at several shapes.

Each shape runs in a fresh subprocess: a random-init Qwen2 of that shape is saved to a temporary
folder, the resident set is read, then the project's ``LearnerEngine`` (real DeepSpeed, fp32 on
CPU) is built and trains two steps on one micro-batch of ``micro_batch_tokens`` tokens. Measured:
the kernel's resident-set high-water mark (VmHWM) minus the resident set before the engine was
built, so weights, gradients, optimizer states, activations and the log-prob buffer are all in
it, as they are in the plan (planned with ``on_gpu=False``: no CUDA context). The plan reads the
shape from the saved ``config.json`` (``model_shape``), as ``rlvr-actor plan`` does.

    OMP_NUM_THREADS=1 .venv/bin/python bench/plan_vs_measured.py

prints a table and writes bench/results/plan_vs_measured.{md,json}. Target: the plan within
±15% of the measurement. What CPU cannot show: the CUDA context, the caching allocator's
fragmentation, bf16 (DeepSpeed's CPU engine runs fp32 here).

One GPU figure is quoted, not measured here: the learner's peak of 53.6 GiB on one H200 for
Qwen2.5-0.5B's shape at 16,384 tokens per micro-batch, bf16, ZeRO-2, checkpointing on, with the
full-logits log-prob path of before the chunking (quoted by issue 36; the run predates this
tree's records). The plan for that shape and path (``full_logits=True``) is printed beside it.
``bench/gpu_check.sh`` measures the chunked path on a GPU when one is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
# name, hidden, layers, vocab, micro_batch_tokens, zero_stage, gradient_checkpointing
SHAPES = [
    ("d256-L4-v32k-z0", 256, 4, 32768, 512, 0, False),
    ("d256-L4-v32k-z2-ckpt", 256, 4, 32768, 512, 2, True),
    ("d512-L6-v32k-z1", 512, 6, 32768, 1024, 1, False),
    ("d512-L8-v8k-z2-ckpt", 512, 8, 8192, 2048, 2, True),
]


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def one(spec: list) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlvr.cli.plan.memory import LearnerSettings, learner_plan
    from rlvr.cli.plan.shapes import model_shape
    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.engine import LearnerEngine, TrainBatchItem

    name, hidden, layers, vocab, tokens, stage, ckpt = spec
    folder = Path(tempfile.mkdtemp(prefix="plan-vs-measured-"))
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 256),
                      tie_word_embeddings=True, max_position_embeddings=tokens + 8)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(folder)
    del model
    engine_cfg = TrainEngineConfig(model_path=str(folder), zero_stage=stage, micro_batch_tokens=tokens,
                                   gradient_checkpointing=ckpt, bf16=False)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (tokens // 4,), generator=g).tolist()
    completion = torch.randint(0, vocab, (tokens - len(prompt),), generator=g).tolist()
    item = TrainBatchItem(prompt, completion, [-10.0] * len(completion), 1.0, "bench/0")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the resident set now
    before = _rss("VmRSS")
    engine = LearnerEngine(engine_cfg, seed=0)
    for _ in range(2):  # the second step is the steady state: AdamW's moments exist from the first step's end
        engine.train_step([item])
    measured = _rss("VmHWM") - before
    engine.close()
    settings = LearnerSettings(bf16=False, zero_stage=stage, offload_optimizer=False, gradient_checkpointing=ckpt,
                               micro_batch_tokens=tokens)
    plan = learner_plan(model_shape(folder), settings, on_gpu=False)
    planned = plan.gpu_bytes + plan.cpu_bytes
    return {"shape": name, "params": model_shape(folder).params, "hidden": hidden, "layers": layers, "vocab": vocab,
            "micro_batch_tokens": tokens, "zero_stage": stage, "gradient_checkpointing": ckpt,
            "planned_bytes": planned, "measured_bytes": measured, "plan_over_measured": planned / measured,
            "parts": {p.name: p.bytes for p in plan.parts}}


QUOTED_H200_GIB = 53.6


def quoted_h200() -> dict:
    """The plan for the quoted H200 run's shape and settings (see the module's docstring)."""
    from transformers import Qwen2Config

    from rlvr.cli.plan.memory import LearnerSettings, learner_plan
    from rlvr.cli.plan.shapes import shape_of_config

    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
    shape = shape_of_config(cfg, "Qwen2.5-0.5B's shape")
    settings = LearnerSettings(bf16=True, zero_stage=2, offload_optimizer=False, gradient_checkpointing=True,
                               micro_batch_tokens=16384, full_logits=True)
    plan = learner_plan(shape, settings, on_gpu=True)
    measured = QUOTED_H200_GIB * 2**30
    return {"shape": "Qwen2.5-0.5B, 16,384 tokens, bf16, ZeRO-2, ckpt, full logits (H200, quoted)",
            "params": shape.params, "planned_bytes": plan.gpu_bytes, "measured_bytes": measured,
            "plan_over_measured": plan.gpu_bytes / measured, "parts": {p.name: p.bytes for p in plan.parts}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(json.loads(args.one))), flush=True)
        return
    wanted = set(filter(None, args.shapes.split(",")))
    rows = []
    for spec in SHAPES:
        if wanted and spec[0] not in wanted:
            continue
        out = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"{spec[0]} failed:\n{out.stderr[-3000:]}")
        rows.append(json.loads(line[7:]))
        r = rows[-1]
        print(f"{r['shape']:<24} {r['params'] / 1e6:6.1f}M  plan {r['planned_bytes'] / 2**20:8.1f} MiB  "
              f"measured {r['measured_bytes'] / 2**20:8.1f} MiB  plan/measured {r['plan_over_measured']:.2f}", flush=True)
    doc = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "load_average": os.getloadavg(),
           "command": " ".join(["OMP_NUM_THREADS=1 .venv/bin/python bench/plan_vs_measured.py", *sys.argv[1:]]),
           "rows": rows, "quoted": quoted_h200()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "plan_vs_measured.json").write_text(json.dumps(doc, indent=2))
    lines = ["# Learner memory plan vs DeepSpeed's measured peak (CPU, fp32)", "",
             f"`{doc['command']}` at {doc['when']}, load average {', '.join(f'{x:.1f}' for x in doc['load_average'])}.",
             "", "| shape | params | micro-batch tokens | ZeRO | checkpointing | plan | measured | plan/measured |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['params'] / 1e6:.1f}M | {r['micro_batch_tokens']} | {r['zero_stage']} | "
                     f"{'on' if r['gradient_checkpointing'] else 'off'} | {r['planned_bytes'] / 2**20:.0f} MiB | "
                     f"{r['measured_bytes'] / 2**20:.0f} MiB | {r['plan_over_measured']:.2f} |")
    from rlvr.cli.plan.memory import FULL_LOGITS_COPIES

    q = doc["quoted"]
    logits = next(v for k, v in q["parts"].items() if k.startswith("log-probs"))
    lines += ["", "## A GPU figure, quoted", "",
              f"{q['shape']}: plan {q['planned_bytes'] / 2**30:.1f} GiB, measured {QUOTED_H200_GIB} GiB, "
              f"plan/measured {q['plan_over_measured']:.2f}. The gap is the old full-logits path's allowance "
              f"({logits / 2**30:.1f} GiB: {FULL_LOGITS_COPIES} fp32 [tokens, vocab] copies, measured on CPU in fp32, "
              "bench/results/learner_memory.md); what the H200 run implies for it is about "
              f"{(QUOTED_H200_GIB * 2**30 - (q['planned_bytes'] - logits)) / (16384 * 151936 * 4):.1f} copies in bf16. "
              "That path is no longer the learner's; the chunked path's plan on a GPU is checked by "
              "`bench/gpu_check.sh`, which prints plan against measured when a GPU is lent."]
    (RESULTS / "plan_vs_measured.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
