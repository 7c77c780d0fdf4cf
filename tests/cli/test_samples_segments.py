"""An agent's episode of several segments, dumped and shown whole (learner/watch/sample_dump.py,
cli/ui/samples_view.py): each segment with its own prompt, mask, log-probs and turns; the turns counted over
the whole episode; the tokens shown for a step those the learner trains (``sample_items``); a dump written
before segments were recorded still reads. The episode is built by hand, its tokens utf-8 bytes as the
scripted model's are (tests/cli/test_samples_agent_up.py has a real agent's, through ``rlvr-actor up``)."""

from __future__ import annotations

import json

import msgspec
import pytest

from rlvr.cli.main import main
from rlvr.learner.train.batching import sample_items
from rlvr.learner.watch.sample_dump import step_file, write_step
from rlvr.protocol import Completion, Episode, Scored, Turn, Verdict
from rlvr.protocol.samples import Segment
from tests.conftest import REPO
from tests.factories import make_sample

SCRIPT = "<script>alert('pwned')</script>\x1b[2J"  # markup for a browser, an escape that clears a terminal
HISTORY_PROMPT = "user: 37*04=\nassistant: "


def _b(text: str) -> list[int]:
    return list(text.encode())


def _history(message: str = SCRIPT) -> Segment:
    """The conversation the agent compacted away: a model turn, the agent's (hostile) message, a model turn."""
    said, added, again = _b("="), _b(f"\nuser: go on {message}\nassistant: "), _b("14")
    ids = said + added + again
    mask = [1] * len(said) + [0] * len(added) + [1] * len(again)
    lps = [-0.3] * len(said) + [0.0] * len(added) + [-0.4] * len(again)
    return Segment(_b(HISTORY_PROMPT), Completion(ids, lps, mask),
                   [Turn(0, len(said), 2), Turn(len(said) + len(added), len(ids), 3)])


def _agent_scored(i: int, reward: float, message: str = SCRIPT) -> Scored:
    """An agent's episode: the history above, then a compacted request and one model turn (the Sample's own)."""
    own = Completion(_b("148"), [-0.25] * 3, [1, 1, 1])
    episode = Episode("my-agent", [Turn(0, 3, 3)], "done", turn_rewards=[reward], env_reward=reward,
                      transcript=[["system", "Summary: 37*04="], ["user", "Answer."], ["assistant", "148"]],
                      segments=[_history(message)], agent=True)
    sample = msgspec.structs.replace(
        make_sample("calc", 8, i, n=2, episode=episode), prompt="37*04=", text="148", policy_version=2,
        policy_version_max=3, prompt_ids=_b("system: Summary: 37*04=\nuser: Answer.\nassistant: "), completion=own)
    return Scored(sample, Verdict(reward, "ok" if reward else "wrong", "env", extracted="148"))  # type: ignore[arg-type]


def _plain(i: int, reward: float) -> Scored:
    s = make_sample("calc", 9, i, n=2)
    return Scored(s, Verdict(reward, "ok" if reward else "wrong", "exact"))  # type: ignore[arg-type]


GROUPS = [[_agent_scored(0, 1.0), _agent_scored(1, 0.0)], [_plain(0, 1.0), _plain(1, 0.0)]]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("agent-run")
    write_step(out, 1, GROUPS, None)
    return out


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models

    # One token per byte, as the scripted ids are: the view decodes them as a run's tokenizer would.
    tok = Tokenizer(models.WordLevel({chr(i): i for i in range(256)}, unk_token=chr(0)))
    tok.decoder = decoders.Fuse()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in step_file(run_dir, 1).read_text().splitlines()]


def test_the_dump_holds_every_segment_with_its_own_prompt_completion_mask_logprobs_and_turns(run_dir):
    rec = _records(run_dir)[0]
    history = _history()
    assert rec["episode"]["segments"] == [{
        "prompt_ids": history.prompt_ids, "completion_ids": history.completion.ids, "mask": history.completion.mask,
        "logprobs": history.completion.logprobs,
        "turns": [{"start": t.start, "end": t.end, "policy_version": t.policy_version} for t in history.turns],
    }]
    assert rec["episode"]["agent"] is True and rec["completion_ids"] == _b("148")  # the own segment, as before
    assert _records(run_dir)[2]["episode"] is None  # one completion: no episode, no segments


def test_the_tokens_shown_for_a_step_are_those_the_learner_trains(run_dir, capsys):
    items = [it for g in GROUPS for sc in g for it in sample_items(sc.sample, 0.0)]  # the learner's sequences
    tokens = sum(len(it.prompt_ids) + len(it.completion_ids) for it in items)
    policy = sum(sum(it.targets()) for it in items)
    assert main(["samples", str(run_dir), "--limit", "1"]) == 0  # the totals are the step's, not what is shown
    out = capsys.readouterr().out
    assert out.startswith(f"══ step 1 · 4 samples · 6 sequences · {tokens} tokens trained (prompt ")
    assert f": policy {policy}, environment " in out.splitlines()[0]
    own, history = sample_items(GROUPS[0][0].sample, 0.0)
    whole = sum(len(it.prompt_ids) + len(it.completion_ids) for it in (own, history))
    assert f"tokens     {whole} tokens trained (prompt " in out and ") in 2 sequences" in out


def test_the_text_view_shows_every_segment_with_its_own_prompt_mask_and_logprobs(run_dir, capsys):
    assert main(["samples", str(run_dir), "--episode", "calc-t8/0"]) == 0
    out = capsys.readouterr().out
    assert "task       37*04=" in out and "3 turns in 2 segments" in out  # turns over the whole episode
    head, rest = out.split("── segment 1 of 2 · trained as calc-t8/0#segment-1 · 2 turns ──\n")
    first, own = rest.split("── segment 2 of 2 · trained as calc-t8/0 · the last model turn's: what the verifier "
                            "read · 1 turn ──\n")
    # Without a tokenizer an agent's request is shown as its ids, never as the task's prompt it is not.
    ids = " ".join(map(str, _b(HISTORY_PROMPT)))
    assert first.startswith(f"prompt     ids {ids}   (the agent's request: --tokenizer decodes it)\n")
    assert "prompt     37*04=" not in out
    n = len(_history().completion.ids)
    assert f"tokens     prompt {len(_b(HISTORY_PROMPT))} · completion {n} (policy 3, environment {n - 3})" in first
    assert f"mask       1×1 0×{n - 3} 1×2" in first
    assert "turn 0 · policy v2 · tokens 0-1" in first and "│ logprobs -0.300" in first
    assert "turn 1 · policy v3" in first and "│ logprobs -0.400 -0.400" in first
    assert "│ (no text recorded for an earlier segment: --tokenizer decodes its ids)" in first
    own_prompt = len(GROUPS[0][0].sample.prompt_ids)
    assert f"tokens     prompt {own_prompt} · completion 3 (policy 3, environment 0)" in own
    assert "turn 0 · policy v3 · tokens 0-3 · turn reward 1.0" in own and "│ 148" in own  # from the transcript
    assert "\x1b" not in out


def test_with_a_tokenizer_each_segment_s_prompt_is_its_own_ids_decoded(run_dir, byte_tokenizer, capsys):
    assert main(["samples", str(run_dir), "--episode", "calc-t8/0", "--tokenizer", str(byte_tokenizer)]) == 0
    out = capsys.readouterr().out
    first, own = out.split("── segment 1 of 2")[1].split("── segment 2 of 2")
    assert "prompt     user: 37*04=\n           assistant:" in first  # a prompt's lines under its first
    assert "prompt     system: Summary: 37*04=\n           user: Answer." in own
    assert "[env] user: go on <script>alert('pwned')</script>\\x1b[2J" in first  # escaped for the terminal


def test_the_html_view_shows_every_segment_and_escapes_the_agent_s_text(run_dir, byte_tokenizer, tmp_path):
    for tok in ([], ["--tokenizer", str(byte_tokenizer)]):
        page = tmp_path / "s.html"
        assert main(["samples", str(run_dir), "--format", "html", "--output", str(page), *tok]) == 0
        text = page.read_text()
        assert "segment 1 of 2 · trained as calc-t8/0#segment-1 · 2 turns" in text
        assert "segment 2 of 2 · trained as calc-t8/0 · the last model turn&#x27;s" in text
        assert "3 turns in 2 segments" in text and "step 1 · 4 samples · 6 sequences" in text
        assert "<script" not in text.lower() and "http://" not in text and "src=" not in text
    assert "&lt;" in text and "title='id 60'>&lt;</span>" in text  # the agent's markup, a masked token, as text


def test_a_dump_written_before_segments_were_recorded_still_reads(run_dir, tmp_path, capsys):
    """Records of a single-sequence episode without the fields added for segments read and show as before."""
    from tests.cli.test_samples import _episode_scored, load_environments

    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(REPO / "examples" / "calculator"))
    load_environments(["calc_env:Calculator"])
    new = tmp_path / "new"
    write_step(new, 1, [[_episode_scored(["=", "148"], 0, 1.0), _episode_scored(["12"], 1, 0.0)]], None)
    mp.undo()
    old = tmp_path / "old"
    step_file(old, 1).parent.mkdir(parents=True)
    lines = []
    for rec in _records(new):
        del rec["episode"]["segments"], rec["episode"]["agent"]
        lines.append(json.dumps(rec))
    step_file(old, 1).write_text("\n".join(lines) + "\n")
    shown = []
    for d in (new, old):
        assert main(["samples", str(d)]) == 0
        shown.append(capsys.readouterr().out)
    assert shown[0] == shown[1] and "2 turns · ended done" in shown[1]


def test_a_damaged_line_is_said_not_skipped_in_silence(run_dir, tmp_path, capsys):
    d = tmp_path / "damaged"
    step_file(d, 1).parent.mkdir(parents=True)
    step_file(d, 1).write_text(step_file(run_dir, 1).read_text()[:-40] + "\n")
    assert main(["samples", str(d), "--limit", "0"]) == 0
    captured = capsys.readouterr()
    assert f"{step_file(d, 1)}:4 is not a JSON record (skipped)" in captured.err
    assert "══ step 1 · 3 samples" in captured.out


def test_the_guide_s_example_is_what_the_view_prints(byte_tokenizer, tmp_path, capsys):
    """docs/samples.md shows a step of two such episodes (the agent's message a plain one) with a tokenizer."""
    write_step(tmp_path, 1, [[_agent_scored(0, 1.0, "what next?"), _agent_scored(1, 0.0, "what next?")]], None)
    assert main(["samples", str(tmp_path), "--limit", "1", "--tokenizer", str(byte_tokenizer)]) == 0
    printed = "\n".join(line.rstrip() for line in capsys.readouterr().out.splitlines())
    guide = (REPO / "docs" / "samples.md").read_text()
    block = guide[guide.index("```\n══ step 1 · 2 samples") + 4:]
    assert printed == block[: block.index("\n```")]
