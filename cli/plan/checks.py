"""The dry run's checks: what would stop a run at start, found before anything starts.

Each check returns ``Finding``s; a finding with ``ok = False`` names the config key (or file)
to fix and says why, and ``plan`` exits non-zero when any is there. The checks do what the
roles would do at start, with the same functions: plug-ins through their registries
(``verify.registry.load_plugins``, ``rollout.envs.registry.load_environments``), the agent
(``agent_checks``: its callable imported, its command's program found and, for Python, started), datasets
through ``load_splits``, a sample of the tasks' verifier specs through ``verify.registry.resolve``
(the parameters, the gold answer among them, as a worker would bind them), the chat template's
extension property through ``rollout.transcript.Transcript`` and the model's config and tokenizer
through transformers, offline. Nothing is downloaded and no role, server or engine starts.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import msgspec

from rlvr.cli.plan.shapes import PREPARED

SAMPLE_TASKS = 32  # tasks per dataset whose verifier spec is resolved


class Finding(msgspec.Struct, frozen=True):
    key: str  # the config key (or file) this is about
    ok: bool
    message: str


def _fail(key: str, message: str) -> Finding:
    return Finding(key, False, message)


def check_plugins(cfg) -> list[Finding]:
    """Import every plug-in the roles would load: ``[verify] plugins``, ``[rollout] environments``."""
    from rlvr.rollout.envs.registry import EnvironmentPluginError, load_environments
    from rlvr.verify.registry import VerifierPluginError, load_plugins

    out = []
    for i, path in enumerate(cfg.verify.plugins):
        try:
            load_plugins([path])
            out.append(Finding(f"verify.plugins[{i}]", True, f"{path} imports"))
        except VerifierPluginError as e:
            out.append(_fail(f"verify.plugins[{i}]", f"{e} (on the verify role's PYTHONPATH?)"))
    for i, path in enumerate(cfg.rollout.environments):
        try:
            load_environments([path])
            out.append(Finding(f"rollout.environments[{i}]", True, f"{path} imports"))
        except EnvironmentPluginError as e:
            out.append(_fail(f"rollout.environments[{i}]", f"{e} (on the rollout role's PYTHONPATH?)"))
    return out


def check_datasets(cfg) -> tuple[list[Finding], list]:
    """Open the training dataset, count its records, resolve a sample of their verifier specs.
    Also returns the tasks read (for the chat-template and length checks)."""
    from rlvr.learner.config import train_dataset
    from rlvr.learner.data.dataset_records import DatasetError
    from rlvr.learner.data.datasets import load_splits

    key = "learn.dataset"
    try:
        splits = load_splits(train_dataset(cfg.learn), seed=cfg.seed)
    except (DatasetError, OSError, ValueError, ImportError) as e:
        return [_fail(_dataset_key(cfg, str(e)), f"{type(e).__name__}: {e}")], []
    out = [Finding(key, True, f"{len(splits.train)} training and {len(splits.heldout)} held-out tasks")]
    if not splits.train:
        out.append(_fail(key, "no training tasks"))
    if cfg.learn.eval.prompts > len(splits.heldout):
        out.append(_fail("learn.eval.prompts", f"{cfg.learn.eval.prompts} asked, {len(splits.heldout)} held out"))
    tasks = splits.train + splits.heldout
    out += check_verifier_specs(cfg, tasks)
    return out, tasks


def _dataset_key(cfg, message: str) -> str:
    """The most specific key a dataset error is about."""
    d = cfg.learn.dataset
    for field in ("answer_field", "prompt_field", "tests_field", "path", "name", "tasks"):
        if hasattr(d, field) and (field in message or (field == "answer_field" and "gold" in message)):
            return f"learn.dataset.{field}"
    return "learn.dataset"


def check_verifier_specs(cfg, tasks: list) -> list[Finding]:
    """Bind a sample of the tasks' verifier specs as a verifier worker would: known names, plug-ins
    listed in ``[verify] plugins``, parameters (the gold answer among them) of the right types."""
    from rlvr.verify.registry import VerifierSpecError, VerifierUnavailableError, import_paths, resolve

    key = "learn.train_verifier" if cfg.learn.train_verifier is not None else "learn.dataset.verifier"
    rng = random.Random(cfg.seed)
    sample = rng.sample(tasks, min(SAMPLE_TASKS, len(tasks)))
    problems: dict[str, str] = {}
    for t in sample:
        for path in import_paths(t.verifier):
            if path not in cfg.verify.plugins:
                problems.setdefault(path, f"names the plug-in {path!r}, which [verify] plugins does not list "
                                          "(a message never makes the verifier import code)")
        try:
            resolve(t.verifier)
        except VerifierUnavailableError as e:
            problems.setdefault(str(e), f"{e}")
        except VerifierSpecError as e:
            if ":" in t.verifier.name and "unknown verifier" in str(e):
                continue  # said above (a listed plug-in that failed is check_plugins' finding)
            problems.setdefault(str(e), f"{t.dataset} record {t.index}: {e}")
    if problems:
        return [_fail(key, m) for m in list(problems.values())[:3]]
    names = sorted({t.verifier.name for t in sample})
    return [Finding(key, True, f"{len(sample)} sampled tasks bind to {', '.join(names)}")]


def load_tokenizer(cfg, path: str):
    """The tokenizer the roles will use; the built-in example's from its builder."""
    if path == PREPARED:
        from rlvr.learner.example.arith_model import build_tokenizer

        prep = cfg.learn.prepare
        return build_tokenizer(chat=bool(prep and prep.tool_share > 0))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def model_paths(cfg) -> list[tuple[str, str]]:
    """(config key, folder) of every model the roles load."""
    out = []
    model = getattr(cfg.rollout.engine, "model", None)
    if model:
        out.append(("rollout.engine.model", model))
    if cfg.learn.engine is not None:
        out.append(("learn.engine.model_path", cfg.learn.engine.model_path))
    return out


def check_models(cfg) -> tuple[list[Finding], Any]:
    """The model config and tokenizer load from each local folder; the rollout and learner name one model.
    Returns the findings and the tokenizer (None when none loads)."""
    out, tokenizer = [], None
    paths = model_paths(cfg)
    if len({p for _, p in paths}) > 1:
        out.append(_fail("learn.engine.model_path", "rollout.engine.model and learn.engine.model_path name different "
                         f"models ({paths[0][1]} and {paths[1][1]}): the learner would train another policy than "
                         "the one sampled"))
    for key, path in paths[:1] + [p for p in paths[1:] if p[1] != paths[0][1]]:
        if path == PREPARED:
            if cfg.learn.prepare is None:
                out.append(_fail(key, '"@prepared" needs [learn.prepare] (the built-in example\'s preparation step)'))
            else:
                tokenizer = load_tokenizer(cfg, path)
                out.append(Finding(key, True, "built by `up`'s preparation step ([learn.prepare])"))
            continue
        if not Path(path, "config.json").is_file():
            out.append(_fail(key, f"{path}: no config.json there (a local model folder; nothing is downloaded)"))
            continue
        try:
            tok = load_tokenizer(cfg, path)
            tokenizer = tokenizer or tok
            out.append(Finding(key, True, f"{path}: config and tokenizer load (vocabulary {len(tok)})"))
        except Exception as e:  # noqa: BLE001 - transformers raises many kinds
            out.append(_fail(key, f"{path}: the tokenizer does not load: {type(e).__name__}: {e}"))
    return out, tokenizer


def env_episodes_configured(cfg) -> bool:
    return cfg.learn.dataset.env is not None or bool(cfg.rollout.environments)


def episodes_configured(cfg) -> bool:
    """Environments or an agent: every turn is rendered with the chat template (the rollout refuses to
    start on a model without one)."""
    return env_episodes_configured(cfg) or cfg.rollout.agent is not None


def check_chat_template(cfg, tokenizer, tasks: list) -> list[Finding]:
    """When episodes are configured: the model has a chat template, and it keeps the extension
    property on a sample conversation (the tokens built turn by turn render as the template would
    render the whole conversation: ``Transcript.extends``). An agent's request that the template
    rewrites starts a new segment (docs/agents.md): not a failure."""
    from rlvr.rollout.episodes import prompt_messages
    from rlvr.rollout.transcript import HFChatCodec, TemplateMissingError, TemplateNotAppendableError, Transcript

    if not episodes_configured(cfg) or tokenizer is None:
        return []
    key = "rollout.engine.model"
    # The prompt's messages exactly as the rollout builds them (a chat prompt's ChatMessage is array_like:
    # its msgspec builtins form is [role, content], which no template reads).
    messages = prompt_messages(next((t.prompt for t in tasks if t.prompt), "1+1="))
    try:
        codec = HFChatCodec(tokenizer)
        tr = Transcript(codec, messages)
        reply = "2"
        ids = codec.encode(reply)
        tr.add_model_turn(ids, [0.0] * len(ids), reply)
        rewrote = tr.add_env_messages([{"role": "user", "content": "3"}])
        ids = codec.encode(reply)
        tr.add_model_turn(ids, [0.0] * len(ids), reply)
        rewrote = tr.add_env_messages([{"role": "user", "content": "4"}]) or rewrote
    except (TemplateMissingError, TemplateNotAppendableError) as e:
        return [_fail(key, f"episodes (an environment or an agent) are configured but the chat template cannot carry them: {e}")]
    except Exception as e:  # noqa: BLE001 - a template that raises while rendering
        return [_fail(key, f"the chat template fails on a sample conversation: {type(e).__name__}: {e}")]
    if rewrote and not env_episodes_configured(cfg):
        return [Finding(key, True, "the chat template rewrites earlier turns on a sample conversation: an agent's "
                                   "request after such a turn starts a new segment (docs/agents.md)")]
    if rewrote:
        verdict = "end" if cfg.rollout.on_template_rewrite == "end" else "keep"
        msg = ("the chat template rewrites earlier turns (the extension property fails on a sample conversation); "
               f"rollout.on_template_rewrite = {verdict!r}")
        if verdict == "end":
            return [_fail(key, msg + ": every episode would end at its first environment reply")]
        return [Finding(key, True, msg + ": episodes keep the tokens the model saw (counted per episode)")]
    return [Finding(key, True, "the chat template extends a sample conversation turn by turn")]


def run_checks(cfg) -> tuple[list[Finding], Any, list]:
    """Every check; returns the findings, the tokenizer (or None) and the dataset's tasks."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from rlvr.cli.plan.agent_checks import check_agent

    findings = check_plugins(cfg) + check_agent(cfg)
    data, tasks = check_datasets(cfg)
    models, tokenizer = check_models(cfg)
    findings += data + models + check_chat_template(cfg, tokenizer, tasks)
    return findings, tokenizer, tasks


__all__ = ["Finding", "check_chat_template", "check_datasets", "check_models", "check_plugins",
           "check_verifier_specs", "env_episodes_configured", "episodes_configured", "model_paths", "run_checks"]
