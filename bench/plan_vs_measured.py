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
           "rows": rows}
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
    (RESULTS / "plan_vs_measured.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
