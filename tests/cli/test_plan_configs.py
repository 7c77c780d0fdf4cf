"""``rlvr-actor plan`` accepts every environment and agent config that docs/ and examples/ give (and `up`
runs), on the published chat templates vendored in tests/data/chat_templates (SmolLM2, Qwen2.5, Qwen3,
Llama 3.1), with the tasks' prompts as written and as chat messages (what an instruct model is given).

A dry run that refuses what `up` trains cries wolf: the template check once built a chat prompt's messages
from their wire form (a ``ChatMessage`` is ``array_like``) and every such config failed with
"dictionary update sequence element #0 has length 4". The doc configs are read from the pages themselves
(every TOML block that starts with a table and names environments, an episode's ``env`` or
``[rollout.agent]``), with the files the page shows beside them (a python block whose first line names
its file). Each model folder is a config.json and a small tokenizer that carries the real template.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import msgspec
import pytest

from rlvr.cli.main import main
from rlvr.cli.run_config import load_config
from tests.cli.test_plan import plan
from tests.conftest import REPO
from tests.doc_blocks import Block, code_blocks
from tests.rollout.chat_tokenizers import chat_tokenizer

TEMPLATES = ["smollm2", "qwen2.5", "qwen3", "llama3"]
TINY_QWEN2 = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=512, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                  max_position_embeddings=2048, tie_word_embeddings=True, torch_dtype="float32")
# A table first, then what makes episodes: environments, a task's env, or an agent.
_WHOLE = re.compile(r"\A(\s*#.*\n)*\s*\[")
_EPISODES = re.compile(r"^\s*(environments\s*=|env\s*=|\[rollout\.agent\])", re.M)


def doc_configs() -> list[Block]:
    blocks = [b for doc in sorted((REPO / "docs").glob("*.md")) for b in code_blocks(f"docs/{doc.name}", "toml")]
    return [b for b in blocks if _WHOLE.match(b.text) and _EPISODES.search(b.text)]


def _agent_calc_as_command() -> str:
    """examples/agent_calc.toml with its own commented-out command in place of the callable."""
    text = (REPO / "examples/agent_calc.toml").read_text()
    command = re.search(r"^# (command = \[.*\])$", text, re.M).group(1)
    return re.sub(r"^callable = .*$", command, text, flags=re.M)


EXAMPLES = {"examples/calculator.toml": None, "examples/agent_calc.toml": None,
            "examples/agent_calc.toml, its command": _agent_calc_as_command}
CONFIGS = list(EXAMPLES) + [b.id for b in doc_configs()]


def test_the_docs_give_the_environment_and_agent_configs_this_test_plans():
    # A guide that loses (or gains) a config shows here; the ids are what the plan tests below run.
    assert sorted(b.doc for b in doc_configs()) == ["docs/agents.md", "docs/environments.md"]


@pytest.fixture(scope="module")
def template_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in TEMPLATES:
        folder = tmp_path_factory.mktemp("tpl") / name
        chat_tokenizer(name).save_pretrained(folder)
        (folder / "config.json").write_text(json.dumps(TINY_QWEN2))
        out[name] = folder
    return out


def _config_file(config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The config as a file, and what it needs beside it: the examples' plug-ins and agents on the path
    (their headers set PYTHONPATH), a doc page's files in a folder of their own, its dataset there."""
    for name in ("calculator", "agent_calc"):
        monkeypatch.syspath_prepend(str(REPO / "examples" / name))
    if config in EXAMPLES:
        monkeypatch.chdir(REPO)  # the examples' paths are the repository's
        make = EXAMPLES[config]
        if make is None:
            return REPO / config
        path = tmp_path / "config.toml"
        path.write_text(make())
        return path
    block = next(b for b in doc_configs() if b.id == config)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # as a user runs it: PYTHONPATH=. rlvr-actor plan ...
    monkeypatch.syspath_prepend(str(tmp_path))
    for code in code_blocks(block.doc, "python"):
        named = re.match(r"# ([\w/]+\.py)\b", code.text)
        if named and "/" in named.group(1):  # a package's module: "# mypkg/guess.py"
            file = tmp_path / named.group(1)
            file.parent.mkdir(parents=True, exist_ok=True)
            (file.parent / "__init__.py").touch()
            file.write_text(code.text)
    importlib.invalidate_caches()  # the folder was on the path before its files were written
    path = tmp_path / "config.toml"
    path.write_text(block.text)
    dataset = load_config(path).learn.dataset
    if dataset.__struct_config__.tag == "jsonl" and not (tmp_path / dataset.path).exists():
        (tmp_path / dataset.path).write_text("".join(json.dumps({"prompt": p, "answer": "-"}) + "\n" for p in (
            "Let's play a game.", "Another round?", "Once more.")))
    return path


def _model_sets(path: Path, folder: Path) -> list[str]:
    cfg = load_config(path)
    if getattr(cfg.rollout.engine, "model", None) is None:  # the trivial engine: give it a model
        sets = ["--set", f'rollout.engine={{kind="hf", model="{folder}"}}']
    else:
        sets = ["--set", f'rollout.engine.model="{folder}"']
    if cfg.learn.engine is not None:
        sets += ["--set", f'learn.engine.model_path="{folder}"']
    return sets


@pytest.mark.parametrize("prompts", ["as written", "chat"])
@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("config", CONFIGS)
def test_plan_accepts_every_environment_and_agent_config_on_the_real_chat_templates(
        config, template, prompts, template_models, tmp_path, monkeypatch, capsys):
    path = _config_file(config, tmp_path, monkeypatch)
    sets = _model_sets(path, template_models[template])
    if prompts == "chat" and "[learn.dataset]" in path.read_text():
        sets += ["--set", 'learn.dataset.prompt_style="chat"']
    elif prompts == "chat":  # the default dataset, as a table of its own
        kind = load_config(path).learn.dataset.__struct_config__.tag
        sets += ["--set", f'learn.dataset={{kind="{kind}", prompt_style="chat"}}']
    rc, out = plan(capsys, "--config", str(path), *sets)
    assert rc == 0, out
    assert "verdict: the run can start" in out
    assert re.search(r"^ok   rollout\.engine\.model: the chat template", out, re.M), out  # the check ran
    if "[rollout.agent]" in path.read_text():
        assert re.search(r"^ok   rollout\.agent\.(callable|command): ", out, re.M), out


def test_plan_counts_a_chat_prompt_s_tokens_as_the_engine_renders_it(template_models, monkeypatch, capsys):
    # The cost estimate's prompt length: a chat prompt rendered through the template, not a failure
    # skipped in silence (which left the estimate at the engine's prompt limit).
    from transformers import AutoTokenizer

    from rlvr.learner.config import train_dataset
    from rlvr.learner.data.datasets import load_splits
    from rlvr.rollout.engines.base import render_prompt_ids

    monkeypatch.syspath_prepend(str(REPO / "examples" / "calculator"))
    folder = template_models["qwen2.5"]
    sets = ["--set", f'rollout.engine.model="{folder}"', "--set", f'learn.engine.model_path="{folder}"',
            "--set", 'learn.dataset.prompt_style="chat"']
    rc = main(["plan", "--json", "--config", str(REPO / "examples/calculator.toml"), *sets])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    cfg = load_config(REPO / "examples/calculator.toml")
    learn = msgspec.structs.replace(cfg.learn, dataset=msgspec.structs.replace(cfg.learn.dataset, prompt_style="chat"))
    splits = load_splits(train_dataset(learn), seed=cfg.seed)
    tasks = (splits.train + splits.heldout)[:64]
    tok = AutoTokenizer.from_pretrained(folder)
    expected = sum(len(render_prompt_ids(tok, t.prompt)) for t in tasks) / len(tasks)
    assert doc["plan"]["cost"]["prompt_tokens"] == pytest.approx(expected)


def test_plan_json_is_the_only_thing_on_stdout_when_a_check_logs(tmp_path, capsys):
    # A jsonl dataset logs its layout; that line goes to stderr, so stdout parses as one JSON document.
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "1+2=", "answer": "3"}\n')
    rc = main(["plan", "--json", "--gpus", "0", "--set", f'learn.dataset={{kind="jsonl", path="{data}", '
               'verifier="exact", holdout=1}', "--set", "learn.eval.prompts=1"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert json.loads(out.out)["can_start"] is True
    assert "dataset_layout" in out.err
