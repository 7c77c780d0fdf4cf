"""One TRL run as its users run it on CPU: ``GRPOTrainer`` with HF generation (no vLLM), in this process.

Run by bench/vs_trl.py as a child process (``python -m vs_trl.run_trl SPEC.json``, with bench/ on the
path) so that its threads, memory and import of TRL are its own. The spec holds the model folder,
the task's model name, the shared settings (``vs_trl.settings.trl_args``), the thread count, the
wall-time budget and the launch time. It writes ``<out>/trl_run.json``: the timed snapshots (the whole
model's state as safetensors every ``keep_every`` optimizer steps, the format rlvr-actor exports) and
the time split between generation (with scoring) and the rest of each training step.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from vs_trl.task import RewardFn, Task, prompt_for_trl

    launched, budget_s, out = spec["launched"], spec["budget_s"], Path(spec["out"])
    from rlvr.cli.commands.up import parse_sets

    task = Task.load(spec["model"], overrides=parse_sets(spec.get("sets", [])))
    reward = RewardFn(task.train, task.max_tokens)
    data = Dataset.from_list([{"prompt": prompt_for_trl(s.prompt), "index": i} for i, s in enumerate(task.train)])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(spec["model_dir"], padding_side="left")
    args = GRPOConfig(output_dir=str(out / "trl_out"), use_cpu=True, bf16=False, report_to="none",
                      save_strategy="no", logging_steps=10, max_steps=100_000, seed=task.cfg.seed,
                      dataloader_num_workers=0, **spec["trl_args"])
    timing = {"generate_s": 0.0, "step_s": 0.0, "steps": 0, "save_s": 0.0}
    snapshots: list[dict] = []

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                timing["generate_s"] += time.perf_counter() - t

        def training_step(self, *a, **kw):
            t = time.perf_counter()
            try:
                return super().training_step(*a, **kw)
            finally:
                timing["step_s"] += time.perf_counter() - t
                timing["steps"] += 1

    class Snapshots(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            step = state.global_step
            if step % spec["keep_every"] == 0:
                t0 = time.perf_counter()
                d = out / "snapshots" / f"step-{step}"
                d.mkdir(parents=True, exist_ok=True)
                state_dict = {k: v.detach().contiguous().clone() for k, v in kw["model"].state_dict().items()}
                if model.config.tie_word_embeddings:
                    state_dict.pop("lm_head.weight", None)
                save_file(state_dict, d / "model.safetensors")
                snapshots.append({"step": step, "t": round(time.time() - launched, 2), "path": str(d)})
                timing["save_s"] += time.perf_counter() - t0
            if time.time() - launched >= budget_s:
                control.should_training_stop = True
            return control

    trainer = Timed(model=model, reward_funcs=[reward], args=args, train_dataset=data, processing_class=tok,
                    callbacks=[Snapshots()])
    started = time.time()
    trainer.train()
    stopped = time.time()
    prompt_tokens = sum(len(r) for r in tok([str(p) for p in data["prompt"][:64]])["input_ids"]) / 64
    record = {
        "started_s": round(started - launched, 2), "wall_s": round(stopped - launched, 2),
        "steps": timing["steps"], "generate_s": round(timing["generate_s"], 2),
        "train_s": round(timing["step_s"] - timing["generate_s"] - timing["save_s"], 2),
        "save_s": round(timing["save_s"], 2),
        "samples_generated": reward.completions, "samples_trained": reward.completions,
        "tokens_generated": reward.completion_tokens, "tokens_trained": reward.completion_tokens,
        "prompt_tokens_mean": round(prompt_tokens, 2), "snapshots": snapshots,
    }
    (out / "trl_run.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
