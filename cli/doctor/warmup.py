"""The doctor's preparation step: ``up``'s own (``rlvr.learner.example.prepare``: the built-in
example builds its tiny model and warms it up with SFT), with the warm-up capped and the prepared
model kept for the next doctor. It runs in the doctor's own process, not in a child as under
``up`` (whose launcher never initialises torch.distributed): the doctor starts DeepSpeed anyway,
and a child would import torch, transformers and DeepSpeed a second time (~20 s of 2 busy cores).

Why a cap: the log-prob agreement checks hold at any weights, and the config's own warm-up runs
until greedy held-out pass@1 reaches ``learn.prepare.sft_target_pass_at_1`` (~250 SFT steps for the
built-in example, several minutes of 2 cores) — more than the doctor's whole budget. So the doctor
stops it after ``warmup_steps`` SFT steps (``rlvr-actor doctor --warmup-steps``, 0 = the config's
own warm-up); the run itself keeps the config's. ``Preparation.capped`` says when the cap ended the
warm-up below its target: the report says so, and the verdict then reads flat rewards as a property
of the capped model, not of the run.

Why a cache: the prepared model is kept in ``<up.runs_dir>/doctor-prepared/<key>/``, keyed by what
the preparation reads (the seed, ``[learn.prepare]``, ``[learn.dataset]``,
``learn.sampling.max_tokens``), the cap, the preparation's own source and the library versions; a
second doctor on the same config starts at once. A model is prepared in a temporary folder beside
it and renamed into place, so a doctor never reads half a model; the folders can be deleted at any
time.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
from pathlib import Path

import msgspec

CACHE = "doctor-prepared"
DEFAULT_WARMUP_STEPS = 50


class Preparation(msgspec.Struct, frozen=True):
    model: str
    sft_steps: int
    sft_greedy_pass_at_1: float
    target_pass_at_1: float
    config_max_steps: int  # the config's own learn.prepare.sft_max_steps
    cap: int  # the doctor's cap on SFT steps (0: none)
    reached_target: bool
    reused: bool  # an earlier doctor prepared it (the cache)
    seconds: float  # the warm-up's own time, when it ran (0 when reused)

    @property
    def capped(self) -> bool:
        """The doctor's cap, not the config, ended the warm-up below its target."""
        return not self.reached_target and 0 < self.cap < self.config_max_steps

    def line(self) -> str:
        how = f"reused from an earlier doctor ({self.model})" if self.reused else f"{self.seconds:.0f} s"
        text = (f"{self.sft_steps} SFT steps, greedy held-out pass@1 {self.sft_greedy_pass_at_1:.3f} "
                f"(target {self.target_pass_at_1:g}); {how}")
        if self.capped:
            text += (f"; warm-up CAPPED by the doctor at {self.cap} steps (--warmup-steps; the run's own goes on "
                     f"to the target, at most {self.config_max_steps} steps)")
        return text


def prepare(cfg, runs_dir: Path, warmup_steps: int, say):
    """``cfg`` with its engines pointed at the prepared model, and the ``Preparation`` (None when the
    config names a model folder and has nothing to prepare). ``up``'s vLLM-to-HF fallback first."""
    from rlvr.cli.commands.up import _resolve_engine
    from rlvr.cli.plan.shapes import PREPARED
    from rlvr.learner.example.prepare import PrepareView, prepare_tiny_arithmetic

    cfg = _resolve_engine(cfg, _Display(say))
    p = cfg.learn.prepare
    if p is None or getattr(cfg.rollout.engine, "model", None) != PREPARED:
        return cfg, None  # a model folder is named: nothing to prepare
    cap = warmup_steps if 0 < warmup_steps < p.sft_max_steps else 0
    folder = Path(runs_dir) / CACHE / cache_key(cfg, cap)
    reused = (folder / "prepared.json").is_file() and (folder / "model" / "config.json").is_file()
    if reused:
        say(f"reusing the prepared model in {folder} (same config, same cap)")
    else:
        capped = cfg
        if cap:
            # one greedy check, at the cap (the pass@1 the report gives): the checks on the way are the run's
            capped_prepare = msgspec.structs.replace(p, sft_max_steps=cap, sft_check_every=cap)
            capped = msgspec.structs.replace(cfg, learn=msgspec.structs.replace(cfg.learn, prepare=capped_prepare))
            say(f"warm-up capped at {cap} SFT steps for the doctor (--warmup-steps; the config's: until greedy "
                f"pass@1 {p.sft_target_pass_at_1:g}, at most {p.sft_max_steps})")
        scratch = folder.with_name(f".{folder.name}-{os.getpid()}")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            say("preparing the model (tokenizer, tiny Qwen2, cold-start SFT), in this process")
            prepare_tiny_arithmetic(PrepareView(seed=capped.seed, learn=capped.learn), scratch, log=say)
            _relocate(scratch, folder)
            os.replace(scratch, folder)  # atomic; a doctor that got there first wins (OSError: not empty)
        except OSError:
            if not (folder / "prepared.json").is_file():
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    info = json.loads((folder / "prepared.json").read_text())
    prep = Preparation(
        model=info["model"], sft_steps=info["sft_steps"], sft_greedy_pass_at_1=info["sft_greedy_pass_at_1"],
        target_pass_at_1=p.sft_target_pass_at_1, config_max_steps=p.sft_max_steps, cap=cap,
        reached_target=info["reached_target"], reused=reused, seconds=0.0 if reused else info["sft_seconds"],
    )
    return _with_model(cfg, prep.model), prep


def cache_key(cfg, cap: int) -> str:
    """What the preparation reads, the cap, the preparation's source and the libraries that write the model."""
    from rlvr.learner import example

    h = hashlib.sha256(msgspec.json.encode({
        "seed": cfg.seed, "prepare": cfg.learn.prepare, "dataset": cfg.learn.dataset,
        "max_tokens": cfg.learn.sampling.max_tokens, "cap": cap,
        "versions": [importlib.metadata.version(d) for d in ("torch", "transformers", "deepspeed")],
    }, order="deterministic"))
    for src in sorted(Path(example.__file__).parent.glob("*.py")):
        h.update(src.read_bytes())
    return f"{cfg.run}-{h.hexdigest()[:16]}"


def _relocate(scratch: Path, folder: Path) -> None:
    """prepared.json names the model in the scratch folder: name it where the rename puts it."""
    path = scratch / "prepared.json"
    info = json.loads(path.read_text())
    info["model"] = str((folder / "model").resolve())
    path.write_text(json.dumps(info, indent=2))


def _with_model(cfg, model: str):
    engine = msgspec.structs.replace(cfg.rollout.engine, model=model)
    learn = cfg.learn
    if learn.engine is not None:
        learn = msgspec.structs.replace(learn, engine=msgspec.structs.replace(learn.engine, model_path=model))
    return msgspec.structs.replace(cfg, rollout=msgspec.structs.replace(cfg.rollout, engine=engine), learn=learn)


class _Display:
    """``up``'s display, as the doctor's ``say``."""

    def __init__(self, say) -> None:
        self.info = self.error = say


__all__ = ["CACHE", "DEFAULT_WARMUP_STEPS", "Preparation", "cache_key", "prepare"]
