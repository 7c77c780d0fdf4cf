"""``rlvr-actor samples``: what the learner trained, read back in text, HTML and JSONL.

The records are written by the learner's own writer (learner/watch/sample_dump.py)
from samples of real calculator episodes (examples/calculator/calc_env.py, played
by rollout/episodes.py with a scripted model), so the view is checked on what a
run writes: a multi-turn episode with its loss mask.
"""

from __future__ import annotations

import json
import time

import anyio
import msgspec
import pytest

from rlvr.cli.main import main
from rlvr.learner.watch.sample_dump import step_file, write_step
from rlvr.protocol import Completion, EnvSpec, SamplingParams, Scored, Task, Verdict, VerifierSpec
from rlvr.rollout.engines.base import Generation, GroupResult
from rlvr.rollout.engines.trivial import ByteChatCodec
from rlvr.rollout.envs.registry import load_environments
from rlvr.rollout.episodes import EpisodeSettings, run_episode
from tests.conftest import REPO
from tests.factories import make_sample

SCRIPT = "<script>alert('pwned')</script>\x1b[2J"  # markup for a browser, an escape that clears a terminal


class ScriptedModel:
    """Says the given turns in order, as the calculator model would; tokens are utf-8 bytes."""

    def __init__(self, turns: list[str], version: int = 3) -> None:
        self.turns, self.version = list(turns), version

    def chat_codec(self):
        return ByteChatCodec()

    async def generate_ids(self, prompt_ids, n, sampling):
        text = self.turns.pop(0)
        ids = list(text.encode())
        return GroupResult(list(prompt_ids), [Generation(ids, [-0.25] * len(ids), text, "stop")],
                           self.version, self.version)


def _episode_scored(turns: list[str], index: int, reward: float) -> Scored:
    task = Task(run="calc", task_id="calc-t7", dataset="arithmetic", index=7, prompt="37*04=",
                verifier=VerifierSpec("env"), n=2, sampling=SamplingParams(max_tokens=7), policy_version=3,
                created_at=time.time(), env=EnvSpec("calc_env:Calculator", {}, max_turns=2, max_tokens=64))

    async def play():
        return await run_episode(ScriptedModel(turns), task, index, EpisodeSettings())

    r = anyio.run(play)
    sample = msgspec.structs.replace(
        make_sample("calc", 7, index, n=2), prompt=task.prompt, prompt_ids=r.prompt_ids, completion=r.completion,
        text=r.text, finish_reason=r.finish_reason, policy_version=r.policy_version,
        policy_version_max=r.policy_version_max, episode=r.episode, verifier=VerifierSpec("env"),
    )
    outcome = "ok" if reward else "wrong"
    return Scored(sample, Verdict(reward, outcome, "env", extracted=r.text))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run dir with one step: a calculator group (one episode asks, one guesses) and a
    single-turn group whose model text is hostile HTML."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(REPO / "examples" / "calculator"))
    load_environments(["calc_env:Calculator"])
    asked = _episode_scored(["=", "148"], 0, 1.0)
    guessed = _episode_scored(["12"], 1, 0.0)
    hostile = [msgspec.structs.replace(sc, sample=msgspec.structs.replace(
        sc.sample, text=SCRIPT, completion=Completion(list(SCRIPT.encode()), [-0.5] * len(SCRIPT))))
        for sc in (_scored_plain(0, 1.0), _scored_plain(1, 0.0))]
    out = tmp_path_factory.mktemp("run")
    write_step(out, 1, [[asked, guessed], hostile], None)
    mp.undo()
    return out


def _scored_plain(i: int, reward: float) -> Scored:
    s = make_sample("calc", 9, i, n=2)
    return Scored(s, Verdict(reward, "ok" if reward else "wrong", "exact"))  # type: ignore[arg-type]


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in step_file(run_dir, 1).read_text().splitlines()]


def test_the_learner_s_writer_records_each_sample_with_its_mask_episode_verdict_and_advantage(run_dir):
    recs = _records(run_dir)
    assert [r["sample_id"] for r in recs] == ["calc-t7/0", "calc-t7/1", "calc-t9/0", "calc-t9/1"]
    asked = recs[0]
    assert asked["step"] == 1 and asked["prompt"] == "37*04=" and asked["text"] == "148"
    assert len(asked["mask"]) == len(asked["completion_ids"]) == len(asked["logprobs"])
    assert 0 in asked["mask"] and 1 in asked["mask"]  # the calculator's reply is masked
    ep = asked["episode"]
    assert ep["end_reason"] == "done" and [t["policy_version"] for t in ep["turns"]] == [3, 3]
    assert ep["info"] == [{"asked": True}, {"asked": True}]  # StepResult.info, turn by turn
    assert ep["transcript"] == [["user", "37*04="], ["assistant", "="], ["tool", "148="], ["assistant", "148"]]
    assert asked["verdict"] == {"reward": 1.0, "outcome": "ok", "verifier": "env", "components": {},
                                "answer": "148", "detail": ""}
    # GRPO over the group's rewards [1, 0]: (r - 0.5) / (std 0.7071 + 1e-6).
    assert asked["advantage"] == pytest.approx(0.7071, abs=1e-3) and recs[1]["advantage"] < 0
    assert asked["advantage_estimator"] == "grpo"
    assert recs[2]["mask"] == [1] * len(recs[2]["completion_ids"])  # single turn: every token the policy's


def test_the_writer_s_advantage_is_the_registered_estimator_the_trainer_uses(run_dir):
    from rlvr.learner.algos.config import AdvantageConfig
    from rlvr.learner.watch.sample_dump import group_advantages

    groups = [[_scored_plain(0, 1.0), _scored_plain(1, 0.0)]]
    plain, name = group_advantages(groups, None)
    torch_grpo, _ = group_advantages(groups, AdvantageConfig(name="grpo"))
    rloo, rname = group_advantages(groups, AdvantageConfig(name="rloo"))
    assert plain[0] == pytest.approx(torch_grpo[0], rel=1e-5) and name == "grpo"
    assert rloo[0] == pytest.approx([1.0, -1.0]) and rname == "rloo"


def test_text_view_shows_the_calculator_episode_with_its_mask_and_sets_environment_tokens_apart(run_dir, capsys):
    assert main(["samples", str(run_dir), "--episode", "calc-t7/0"]) == 0
    out = capsys.readouterr().out
    assert "sample calc-t7/0" in out and "prompt     37*04=" in out
    assert "mask       1×" in out and " 0×" in out  # the runs of the loss mask
    assert "turn 0 · policy v3" in out and "turn 1 · policy v3" in out and 'info {"asked": true}' in out
    env_lines = [line for line in out.splitlines() if line.startswith("  [env]")]
    assert env_lines and any("tool: 148=" in line for line in env_lines)  # the calculator's reply, set apart
    assert "  │ 148" in out and "logprobs -0.250" in out  # the policy's answer and its behaviour log-probs
    assert "reward 1.0 · ok · verifier env" in out and "advantage  +0.7071 (grpo)" in out
    assert "ended done" in out
    assert main(["samples", str(run_dir), "--episode", "calc-t9/0"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "</script>\\x1b[2J" in out  # model text cannot drive the terminal


def test_html_view_is_self_contained_sets_environment_tokens_apart_and_escapes_model_text(run_dir, tmp_path):
    page = tmp_path / "s.html"
    assert main(["samples", str(run_dir), "--format", "html", "--output", str(page)]) == 0
    text = page.read_text()
    assert "<script" not in text.lower()  # the model's <script> is text, never markup
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in text
    assert "class='seg env'" in text and "class='seg policy'" in text and ".env{background" in text
    assert "http://" not in text and "https://" not in text and "src=" not in text  # nothing fetched


def test_jsonl_format_is_the_raw_records_and_limit_and_step_select(run_dir, capsys):
    assert main(["samples", str(run_dir), "--format", "jsonl", "--step", "1", "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == _records(run_dir)[:2]


def test_a_missing_step_or_sample_is_a_clear_error(run_dir, tmp_path, capsys):
    assert main(["samples", str(run_dir), "--step", "9"]) == 2
    assert "no samples of step 9" in capsys.readouterr().err
    assert main(["samples", str(tmp_path)]) == 2
    assert main(["samples", str(run_dir), "--episode", "nope/0"]) == 1
    assert "no sample 'nope/0'" in capsys.readouterr().err


def test_with_a_tokenizer_each_token_is_decoded_and_the_html_stays_escaped(run_dir, tmp_path, capsys):
    from tokenizers import Tokenizer, decoders, models

    # One token per byte, as the scripted model's ids are: the view decodes them as a run's tokenizer would.
    vocab = {chr(i) if chr(i).isprintable() else f"<{i}>": i for i in range(256)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<0>"))
    tok.decoder = decoders.Fuse()
    tok.save(str(tmp_path / "tokenizer.json"))
    assert main(["samples", str(run_dir), "--episode", "calc-t7/0", "--tokenizer", str(tmp_path)]) == 0
    assert "  │ 148\n" in capsys.readouterr().out
    page = tmp_path / "t.html"
    assert main(["samples", str(run_dir), "--format", "html", "--tokenizer", str(tmp_path / "tokenizer.json"),
                 "--output", str(page)]) == 0
    text = page.read_text()
    assert "title='id 52 · logprob -0.250'>4</span>" in text and "<script" not in text.lower()
    assert "<span class='tok' title='id 60 · logprob -0.500'>&lt;</span>" in text


def test_the_guide_s_calculator_example_is_what_the_view_prints(run_dir, capsys):
    assert main(["samples", str(run_dir), "--episode", "calc-t7/0"]) == 0
    printed = capsys.readouterr().out
    guide = (REPO / "docs" / "samples.md").read_text()
    block = guide[guide.index("```\n━━ step 1 · sample calc-t7/0") + 4:]
    assert printed == block[: block.index("```")]
