"""Records from files: the ``jsonl`` and ``hf`` dataset kinds, verl's layout, dotted fields, prompts.

A record becomes a ``TaskSpec``: its prompt (a string, or a list of
``{role, content}`` messages, rendered by ``render_prompt``), the verifier
with the record's answer as ``params.gold`` (or its tests as
``params.tests``), and the record's other fields as ``TaskSpec.record``, for
reward functions (``VerifyContext.record``).

Field names are dotted paths into nested records (``reward_model.ground_truth``).
verl's parquet layout (``data_source``, ``prompt`` as messages, ``ability``,
``reward_model: {style, ground_truth}``, ``extra_info``) reads as it is: the
layout is detected from the first record, or named (``layout = "verl"``); the
answer is then ``reward_model.ground_truth`` and a record's ``data_source``
names its dataset. Which layout was chosen, and why, is logged at load
(``dataset_layout``) and said in every error about a field the layout chose.

Nothing is silently wrong data: a record without its gold answer (absent,
null or NaN) is an error naming the record and the field, or left out and
counted with ``on_missing_gold = "skip"``, wherever the verifier reads one
(``reads_gold``); a prompt stored as the JSON text of a message list is read
as those messages (said once per load), and one that only looks like it is
an error naming the record.

Hugging Face ``datasets`` is imported only for the ``hf`` kind, and only
offline: ``HF_DATASETS_OFFLINE`` and ``HF_HUB_OFFLINE`` are set before the
import, so nothing is fetched, not even a download counter.
"""

from __future__ import annotations

import glob
import gzip
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from rlvr.actors.logs import get_logger
from rlvr.learner.data.dataset_config import HFDataset, JsonlDataset, PromptStyle, RecordDataset, reads_gold
from rlvr.protocol import VerifierSpec
from rlvr.protocol.tasks import ChatMessage

_ROLES = ("system", "user", "assistant")
_MISSING = object()
_NOT_THERE = object()
log = get_logger(__name__)


class DatasetError(ValueError):
    """A dataset that cannot be read as configured; the message names the file, record and field."""


# --- prompts -----------------------------------------------------------------------------------
def render_prompt(raw: Any, style: PromptStyle, where: str = "prompt") -> str | list[ChatMessage]:
    """What the rollout is sent for the prompt ``raw``: chat messages for a message
    list (and for a string with ``prompt_style = "chat"``), else the string."""
    if isinstance(raw, str):
        if style.prompt_style == "bare":
            return raw
        messages = [ChatMessage("user", raw)]
    elif isinstance(raw, (list, tuple)):
        messages = [_message(m, f"{where}[{i}]") for i, m in enumerate(raw)]
        if not messages:
            raise DatasetError(f"{where} is an empty list of messages")
    else:
        raise DatasetError(f"{where} is a {type(raw).__name__}, not a string or a list of {{role, content}} messages")
    if style.system_prompt and messages[0].role != "system":
        messages.insert(0, ChatMessage("system", style.system_prompt))
    return messages


def _message(m: Any, where: str) -> ChatMessage:
    if not isinstance(m, dict) or not isinstance(m.get("content"), str) or m.get("role") not in _ROLES:
        raise DatasetError(f"{where} is not a {{role, content}} message with role in {_ROLES}: {str(m)[:200]}")
    return ChatMessage(m["role"], m["content"])


# --- fields ------------------------------------------------------------------------------------
def get_path(record: dict[str, Any], dotted: str, default: Any = _MISSING) -> Any:
    """``record["a"]["b"]`` for ``"a.b"`` (a whole key with a dot in it wins);
    ``KeyError`` naming the path when absent and no ``default`` is given."""
    if dotted in record:
        return record[dotted]
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            if default is _MISSING:
                raise KeyError(dotted)
            return default
        value = value[part]
    return value


def is_verl(record: dict[str, Any]) -> bool:
    return all(k in record for k in ("data_source", "prompt", "reward_model")) and isinstance(
        record["reward_model"], dict
    )


def choose_layout(cfg: RecordDataset, first: dict[str, Any]) -> tuple[bool, str]:
    """(whether verl's layout is read, why): said at load and in every error about a default field."""
    if cfg.layout != "auto":
        return cfg.layout == "verl", f'the {cfg.layout} layout, named by learn.dataset.layout'
    if is_verl(first):
        return True, "verl's layout: the first record has data_source, prompt and reward_model"
    verl_columns = [k for k in ("data_source", "reward_model", "extra_info", "ability") if k in first]
    if not verl_columns:
        return False, "the plain layout: the first record has none of verl's columns (data_source, reward_model)"
    missing = [k for k in ("data_source", "prompt", "reward_model") if k not in first]
    why = (f"no {' or '.join(f'`{k}`' for k in missing)} column" if missing
           else f"its `reward_model` is a {type(first['reward_model']).__name__}, not {{ground_truth: ...}}")
    return False, (f"the plain layout: the first record has {', '.join(verl_columns)} but {why}, so verl's "
                   f"layout (data_source, prompt, reward_model.ground_truth) was not used")


def _gold(value: Any) -> Any:
    """The answer as verifiers take it: numbers as their text, lists and strings as they are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return str(value)


def _absent(value: Any) -> bool:
    """No answer: null, or the NaN pandas writes for a missing number."""
    return value is None or (isinstance(value, float) and math.isnan(value))


# A string that starts like a list of chat messages: '[{"role": ...' or "[{'content': ...".
_LOOKS_LIKE_MESSAGES = re.compile(r"""^\s*\[\s*\{\s*["']?(role|content)["']?\s*:""")


def json_messages(text: str, where: str) -> list | None:
    """The messages in ``text`` when it is the JSON text of a message list (a column written
    with ``json.dumps``), else None; ``DatasetError`` when it looks like one but is not JSON."""
    if not _LOOKS_LIKE_MESSAGES.match(text):
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        hint = " (Python's repr of a list, not JSON: write the column with json.dumps)" if "'" in text[:20] else ""
        raise DatasetError(f"{where} looks like the JSON text of chat messages but is not JSON{hint}: {e}: "
                           f"{text[:200]}") from None
    if not isinstance(value, list):
        raise DatasetError(f"{where} looks like the JSON text of chat messages but is a "
                           f"{type(value).__name__}: {text[:200]}")
    return value


# --- records -> specs --------------------------------------------------------------------------
def record_specs(cfg: RecordDataset, records: list[dict[str, Any]], name: str, source: str) -> list:
    """One ``TaskSpec`` per record, in order (``source`` names the file in errors); a record
    without a gold answer is an error, or left out with ``on_missing_gold = "skip"``."""
    from rlvr.learner.data.datasets import TaskSpec

    if not records:
        return []
    verl, layout = choose_layout(cfg, records[0] if isinstance(records[0], dict) else {})
    prompt_field = cfg.prompt_field or "prompt"
    answer_field = cfg.tests_field or cfg.answer_field or ("reward_model.ground_truth" if verl else "answer")
    answer_key = "tests_field" if cfg.tests_field else "answer_field"
    default_note = "" if cfg.tests_field or cfg.answer_field else f"; the default of {layout}"
    needs_gold = reads_gold(cfg, verl=verl)
    log.info("dataset_layout", source=source, records=len(records), layout="verl" if verl else "plain", why=layout,
             prompt_field=prompt_field, answer_field=answer_field, gold="required" if needs_gold else "optional")
    out, skipped, from_json = [], [], 0
    for i, r in enumerate(records):
        where = f"{source} record {i}"
        if not isinstance(r, dict):
            raise DatasetError(f"{where} is a {type(r).__name__}, not an object")

        def field(path: str, key: str) -> Any:
            try:
                return get_path(r, path)
            except KeyError:
                raise DatasetError(f"{where} has no field {path!r} (learn.dataset.{key}; the record has: "
                                   f"{', '.join(map(str, r))})") from None

        raw_prompt = field(prompt_field, "prompt_field")
        found = get_path(r, answer_field, _NOT_THERE)
        gold = None if found is _NOT_THERE else found
        if _absent(gold) and needs_gold:
            if cfg.on_missing_gold == "skip":
                skipped.append(i)
                continue
            what = "has no field" if found is _NOT_THERE else f"has {gold!r} in"
            verifier = cfg.verifier_spec.name if cfg.verifier_spec is not None else cfg.verifier
            raise DatasetError(
                f"{where} {what} {answer_field!r} (learn.dataset.{answer_key}{default_note}; the record has: "
                f"{', '.join(map(str, r))}): no gold answer, and the verifier {verifier!r} reads one (it would "
                f"score every answer wrong); fix the record, or set on_missing_gold = \"skip\" to leave it out")
        params: dict[str, Any] = {}
        if not _absent(gold):
            params["tests" if cfg.tests_field else "gold"] = _tests(gold) if cfg.tests_field else _gold(gold)
        for param, path in cfg.params_fields.items():
            params[param] = field(path, f"params_fields.{param}")
        prompt_where = f"{where} field {prompt_field!r}"
        if isinstance(raw_prompt, str) and (parsed := json_messages(raw_prompt, prompt_where)) is not None:
            raw_prompt, from_json = parsed, from_json + 1
        prompt = render_prompt(raw_prompt, cfg, prompt_where)
        dataset = str(r["data_source"]) if verl and r.get("data_source") else name
        out.append(TaskSpec(dataset, i, prompt, VerifierSpec(cfg.verifier, params), record=_record(cfg, r, prompt_field)))
    if from_json:
        log.info("dataset_json_prompts", source=source, prompts=from_json, field=prompt_field,
                 note="prompts stored as the JSON text of chat messages were read as chat messages")
    if skipped:
        log.warning("dataset_records_skipped", source=source, skipped=len(skipped), of=len(records),
                    field=answer_field, first=skipped[:10], reason="no gold answer (on_missing_gold = \"skip\")")
        if not out:
            raise DatasetError(f"{source}: every record ({len(records)}) lacks a gold answer in {answer_field!r} "
                               f"(learn.dataset.{answer_key}{default_note})")
    return out


def _record(cfg: RecordDataset, r: dict[str, Any], prompt_field: str) -> dict[str, Any]:
    if cfg.record_fields is None:
        top = prompt_field.split(".", 1)[0] if prompt_field not in r else prompt_field
        return {k: v for k, v in r.items() if k != top}
    return {f: v for f in cfg.record_fields if (v := get_path(r, f, None)) is not None}


def _tests(value: Any) -> Any:
    # LiveCodeBench ships its test cases as a JSON-encoded string.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


# --- reading -----------------------------------------------------------------------------------
def read_file(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL (optionally gzipped), JSON array or Parquet file."""
    if not path.exists():
        raise DatasetError(f"dataset file {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        if path.suffix == ".json":
            return json.load(f)
        return [json.loads(line) for line in f if line.strip()]


def jsonl_specs(cfg: JsonlDataset) -> list:
    path = Path(cfg.path)
    return record_specs(cfg, read_file(path), path.stem, str(path))


_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".gz": "json", ".arrow": "arrow", ".csv": "csv"}


def hf_specs(cfg: HFDataset) -> tuple[list, list | None]:
    """(the train split's specs, the held-out split's when ``heldout_split`` names one)."""
    train = _hf_records(cfg, cfg.split)
    name = Path(cfg.path.rstrip("/")).name.split(".")[0] or "hf"
    held = _hf_records(cfg, cfg.heldout_split) if cfg.heldout_split else None
    return (record_specs(cfg, train, name, f"{cfg.path} [{cfg.split}]"),
            None if held is None else record_specs(cfg, held, name, f"{cfg.path} [{cfg.heldout_split}]"))


def _hf_records(cfg: HFDataset, split: str) -> list[dict[str, Any]]:
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        os.environ.setdefault(var, "1")  # local files only: never reach the Hub (not even its counters)
    try:
        import datasets
    except ImportError as e:
        raise DatasetError(f"kind = \"hf\" needs the datasets package (pip install datasets): {e}") from None
    datasets.disable_progress_bars()  # its bars would fill the learner's log
    path = Path(cfg.path)
    if path.is_dir() and any((path / f).exists() for f in ("dataset_dict.json", "state.json", "dataset_info.json")):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DatasetError(f"{path} has no split {split!r} (it has: {', '.join(ds)})")
            ds = ds[split]
        elif split != cfg.split:
            raise DatasetError(f"{path} is a single Dataset (saved without splits): it has no split {split!r}")
        return ds.to_list()
    files = sorted(glob.glob(cfg.path)) if any(c in cfg.path for c in "*?[") else [cfg.path]
    files = [f for f in files if Path(f).is_file()]
    if not files:
        raise DatasetError(f"no dataset at {cfg.path} (a save_to_disk folder, or local data files)")
    kinds = {_BUILDERS.get(Path(f).suffix) for f in files}
    if len(kinds) != 1 or None in kinds:
        raise DatasetError(f"{cfg.path}: data files must all be one of {sorted(set(_BUILDERS))}, got {files[:5]}")
    if split != "train":
        raise DatasetError(f"{cfg.path}: data files are read as one split, 'train'; {split!r} needs a saved DatasetDict")
    return datasets.load_dataset(kinds.pop(), data_files=files, split="train").to_list()


__all__ = ["DatasetError", "choose_layout", "get_path", "hf_specs", "is_verl", "json_messages", "jsonl_specs",
           "read_file", "record_specs", "render_prompt"]
