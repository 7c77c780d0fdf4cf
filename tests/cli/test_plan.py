"""``rlvr-actor plan``: the dry run on every example config, and each way it refuses a run.

The GPU examples name models under /models that this machine does not have; they are pointed
(``--set``) at a folder holding a tiny model's tokenizer and weights beside the config.json of
Qwen2.5-0.5B: the plan reads the shape from the config alone, so it plans for 494M parameters
without reading a weight (the folder's weights are the tiny model's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rlvr.cli.main import main
from tests.conftest import REPO

QWEN05B = dict(
    architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=151936, hidden_size=896,
    intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
    max_position_embeddings=32768, tie_word_embeddings=True, torch_dtype="bfloat16",
)
EXAMPLES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "examples").glob("*.toml")) + ["cli/builtin.toml"]


@pytest.fixture(scope="module")
def qwen_shaped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.learner.example.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path_factory.mktemp("plan") / "qwen05b-shaped", seed=0)
    (folder / "config.json").write_text(json.dumps(QWEN05B))
    return folder


@pytest.fixture
def plugin_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    # examples/calculator.toml, byo.toml and agent_calc.toml are run with PYTHONPATH=examples/<name> (their headers).
    for name in ("calculator", "byo", "agent_calc"):
        monkeypatch.syspath_prepend(str(REPO / "examples" / name))


def plan(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    rc = main(["plan", "--quiet-config", *argv])
    out = capsys.readouterr()
    return rc, out.out + out.err


def _model_sets(config: str, folder: Path) -> list[str]:
    text = (REPO / config).read_text()
    if "@prepared" in text:
        return []
    return ["--set", f'rollout.engine.model="{folder}"', "--set", f'learn.engine.model_path="{folder}"']


@pytest.mark.parametrize("config", EXAMPLES)
def test_plan_checks_every_example_config_with_no_role_started(config, qwen_shaped, plugin_paths, capsys):
    # What earlier tests of the session left, e.g. the resource tracker multiprocessing starts once per
    # process (vLLM in tests/cli/test_doctor_vllm.py starts it), is not the plan's doing.
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    rc, out = plan(capsys, "--config", str(REPO / config), *_model_sets(config, qwen_shaped))
    assert rc == 0, out
    assert "verdict: the run can start" in out
    assert "# checks" in out and "learn.dataset:" in out
    assert "## learn:" in out or "[learn.engine]" not in (REPO / config).read_text()
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert started == [], [p.cmdline() for p in started]  # no role, server or engine was started


def test_plan_prints_the_resolved_config(capsys):
    rc = main(["plan", "--set", "learn.steps=7"])
    out = capsys.readouterr().out
    assert rc == 0
    assert '"steps": 7' in out


def test_plan_refuses_a_learner_that_cannot_fit_naming_role_shortfall_and_fix(qwen_shaped, capsys):
    # gpu_qwen.toml on one 16 GiB GPU: vLLM keeps 35%, the learner gets 10.4 GiB and needs ~12.
    rc, out = plan(capsys, "--config", str(REPO / "examples/gpu_qwen.toml"), "--gpu-memory", "16GiB",
                   *_model_sets("examples/gpu_qwen.toml", qwen_shaped))
    assert rc == 1
    line = next(x for x in out.splitlines() if x.startswith("FAIL learn does not fit"))
    assert "GiB more than" in line and "gpu_memory_utilization" in line
    fixes = [x for x in out.splitlines() if x.strip().startswith("fix:")]
    assert any("micro_batch_tokens" in f or "offload_optimizer" in f for f in fixes), out
    # The same config on an 80 GiB card fits, and DeepSpeed's own estimate is printed beside the plan's.
    rc, out = plan(capsys, "--config", str(REPO / "examples/gpu_qwen.toml"), "--gpu-memory", "80GiB",
                   *_model_sets("examples/gpu_qwen.toml", qwen_shaped))
    assert rc == 0, out
    assert "estimate_zero2_model_states_mem_needs" in out
    assert "# estimate (not a measurement)" in out and "assumed: learner MFU 20%" in out


def test_plan_refuses_a_rollout_whose_kv_cache_holds_no_sequence(qwen_shaped, capsys):
    rc, out = plan(capsys, "--config", str(REPO / "examples/gpu_qwen.toml"), "--gpu-memory", "4GiB",
                   *_model_sets("examples/gpu_qwen.toml", qwen_shaped))
    assert rc == 1
    assert "FAIL rollout does not fit (rollout.engine.max_model_len)" in out
    assert "fix: rollout.engine.tensor_parallel_size = 2" in out


def test_a_broken_plugin_path_names_its_key(capsys):
    rc, out = plan(capsys, "--set", 'verify.plugins=["no_such_module_xyz:score"]')
    assert rc == 1
    assert "FAIL verify.plugins[0]:" in out and "no_such_module_xyz" in out


def test_a_broken_environment_path_names_its_key(capsys):
    rc, out = plan(capsys, "--set", 'rollout.environments=["no_such_env_xyz:Env"]')
    assert rc == 1
    assert "FAIL rollout.environments[0]:" in out


def test_a_dataset_missing_its_answer_field_names_the_key(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "1+1=", "solution": "2"}\n{"prompt": "1+2=", "solution": "3"}\n')
    rc, out = plan(capsys, "--set", f'learn.dataset={{kind="jsonl", path="{data}", verifier="exact"}}')
    assert rc == 1
    assert "FAIL learn.dataset.answer_field:" in out and "no field 'answer'" in out


def test_a_verifier_spec_with_bad_params_names_the_key(capsys):
    rc, out = plan(capsys, "--set", 'learn.dataset.verifier={name="regex", params={pattern="(", mode="full"}}')
    assert rc == 1
    assert "FAIL learn.dataset.verifier:" in out


def _with_template(src: Path, dst: Path, template: str | None) -> Path:
    from transformers import AutoTokenizer

    shutil.copytree(src, dst)
    (dst / "chat_template.jinja").unlink(missing_ok=True)
    tok = AutoTokenizer.from_pretrained(src)
    tok.chat_template = template
    tok.save_pretrained(dst)
    return dst


# Qwen3-style: every assistant turn before the last user message loses its content.
REWRITING = ("{% for m in messages %}{% if m['role'] == 'assistant' and loop.index0 < messages|length - 2 %}"
             "<|im_start|>assistant\n<|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
             "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("template,end,expect", [
    (None, "keep", "has none" ),
    (REWRITING, "end", "rewrites earlier turns"),
])
def test_a_bad_chat_template_names_the_model_key(template, end, expect, qwen_shaped, tmp_path, plugin_paths, capsys):
    folder = _with_template(qwen_shaped, tmp_path / "model", template)
    rc, out = plan(capsys, "--config", str(REPO / "examples/calculator.toml"),
                   "--set", f'rollout.engine.model="{folder}"', "--set", f'learn.engine.model_path="{folder}"',
                   "--set", f'rollout.on_template_rewrite="{end}"')
    assert rc == 1, out
    line = next(x for x in out.splitlines() if x.startswith("FAIL rollout.engine.model"))
    assert expect in line or ("chat template" in line), line


def test_plan_json_is_machine_readable(capsys):
    rc = main(["plan", "--json", "--gpus", "0"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["can_start"] is True
    assert doc["plan"]["learner"]["parts"][0]["name"].startswith("weights")


def test_plan_imports_no_role_s_actor():
    # In a process of its own: earlier tests in this one may have imported the actors already.
    probe = ("import sys; from rlvr.cli.main import main; rc = main(['plan', '--json', '--gpus', '0']); "
             "sys.stderr.write('ACTORS=%s' % [m for m in ('rlvr.rollout.actor', 'rlvr.verify.actor', "
             "'rlvr.learner.actor') if m in sys.modules]); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ACTORS=[]" in out.stderr, out.stderr[-2000:]
