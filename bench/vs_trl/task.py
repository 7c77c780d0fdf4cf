"""The task both frameworks train on, read from one rlvr-actor config.

The config (the built-in example's ``cli/builtin.toml`` or ``examples/smollm2.toml``) names the dataset,
its verifier and the sampling; both frameworks take their prompts, held-out split and reward from here:
rlvr-actor through its own verifier actors, TRL through ``reward_fn`` (the same verifier, called in
process), and the evaluation through ``score``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODELS = ("builtin", "smollm2")
REPO = Path(__file__).resolve().parents[2]


def config_path(model: str) -> Path:
    if model == "builtin":
        from rlvr.cli.commands.up import builtin_config_path

        return builtin_config_path()
    if model == "smollm2":
        return REPO / "examples" / "smollm2.toml"
    raise ValueError(f"--model {model!r}: one of {MODELS}")


@dataclass
class Task:
    cfg: object  # rlvr.cli.run_config.Config
    train: list  # TaskSpec
    heldout: list  # TaskSpec

    @classmethod
    def load(cls, model: str, overrides: dict | None = None) -> Task:
        from rlvr.cli.run_config import load_config
        from rlvr.learner.data.datasets import load_splits

        cfg = load_config(config_path(model), overrides=overrides)
        splits = load_splits(cfg.learn.dataset, seed=cfg.seed)
        return cls(cfg, list(splits.train), list(splits.heldout))

    @property
    def max_tokens(self) -> int:
        return self.cfg.learn.sampling.max_tokens

    @property
    def temperature(self) -> float:
        return self.cfg.learn.sampling.temperature


def prompt_for_trl(prompt) -> str | list[dict]:
    """A TaskSpec prompt as TRL's dataset holds it: text, or conversational messages."""
    if isinstance(prompt, str):
        return prompt
    return [{"role": m.role, "content": m.content} for m in prompt]


def score(verifier, text: str, completion_tokens: int, max_tokens: int) -> tuple[float, bool]:
    """(reward, correct) of one completion: the reward rlvr-actor's verifier gives, and whether its
    accuracy part passed (what pass@1 counts; the format bonus alone is not a correct answer)."""
    from rlvr.verify.registry import VerifyContext

    verdict = verifier(text, VerifyContext(completion_tokens=completion_tokens, max_tokens=max_tokens))
    correct = verdict.components.get("accuracy", verdict.reward) > 0
    return float(verdict.reward), bool(correct)


class RewardFn:
    """The task's verifier as a TRL reward function: ``index`` is the dataset column naming the TaskSpec."""

    __name__ = "rlvr_verifier"

    def __init__(self, specs: list, max_tokens: int) -> None:
        from rlvr.verify.registry import resolve

        self.verifiers = [resolve(s.verifier) for s in specs]
        self.max_tokens = max_tokens
        self.completions = 0
        self.completion_tokens = 0

    def __call__(self, prompts, completions, completion_ids, index, **_) -> list[float]:
        out = []
        for c, ids, i in zip(completions, completion_ids, index):
            text = c if isinstance(c, str) else c[-1]["content"]
            out.append(score(self.verifiers[i], text, len(ids), self.max_tokens)[0])
            self.completions += 1
            self.completion_tokens += len(ids)
        return out
