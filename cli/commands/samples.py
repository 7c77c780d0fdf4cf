"""``rlvr-actor samples RUN_DIR``: read what the learner trained.

    rlvr-actor samples runs/calculator                       # the last step, in the terminal
    rlvr-actor samples runs/calculator --step 40 --limit 3
    rlvr-actor samples runs/calculator --episode calculator-t17/2
    rlvr-actor samples runs/calculator --format html --output step.html
    rlvr-actor samples runs/calculator --format jsonl         # the raw records

The learner writes every trained sample of a step to
``<run_dir>/samples/step-<N>.jsonl`` (rlvr/learner/watch/sample_dump.py). This
command shows each one: the prompt, each turn with its loss mask (the
policy's tokens, trained on, apart from the environment's, masked), the
policy version and behaviour log-probs, the tools' calls and errors, the
environment's info, how the episode ended, the verdict, the reward and the
advantage. ``text`` is for a terminal (environment tokens on lines of their
own, ``[env]``); ``html`` is one self-contained file (no external resource;
every piece of model or environment text escaped: model output is untrusted);
``jsonl`` is the records as written. docs/samples.md shows how to read them.

Token text is decoded with the run's tokenizer when one is found
(``--tokenizer``, else the model the run's config names, else
``<run_dir>/model``); without one, each turn's text comes from the episode's
transcript and the tokens are shown as ids. Reads files only: no bus, no torch.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

DESCRIPTION = ("Show the samples the learner trained (<run_dir>/samples/step-N.jsonl): prompt, turns with "
               "their loss mask, policy versions, log-probs, tools, info, verdict, reward and advantage.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    run_dir: str
    step: int | None = None
    episode: str | None = None
    format: Literal["text", "html", "jsonl"] = "text"
    output: str | None = None
    limit: int = 20
    tokenizer: str | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="the run directory (the learner's out_dir, with samples/)")
    p.add_argument("--step", type=int, help="the optimizer step to show (default: the last one written)")
    p.add_argument("--episode", help="one sample (TASK_ID/INDEX) or every sample of a group (its id), "
                                     "searched in every step unless --step is given")
    p.add_argument("--format", choices=("text", "html", "jsonl"), default="text")
    p.add_argument("--output", help="write here instead of standard output")
    p.add_argument("--limit", type=int, default=20, help="samples to show at most (0: all)")
    p.add_argument("--tokenizer", help="a tokenizer.json, or a model folder with one, to show token text")


class SamplesMissingError(FileNotFoundError):
    """The run directory has no sample dump (or not the step asked for)."""


# --- reading ------------------------------------------------------------------------
def read_records(run_dir: Path, step: int | None = None, episode: str | None = None) -> list[dict[str, Any]]:
    """The records of ``step`` (default: the last step, or every step when looking for ``episode``)."""
    from rlvr.learner.watch.sample_dump import SAMPLES_DIR, step_file

    files = sorted((Path(run_dir) / SAMPLES_DIR).glob("step-*.jsonl"))
    if step is not None:
        files = [f for f in files if f == step_file(run_dir, step)]
    elif episode is None:
        files = files[-1:]
    if not files:
        what = f"step {step}" if step is not None else "any step"
        raise SamplesMissingError(f"{Path(run_dir) / SAMPLES_DIR} has no samples of {what} "
                                  "(the learner writes them after each step: [learn.samples] dump)")
    out = []
    for f in files:
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line of a file being replaced
            if isinstance(rec, dict) and (episode is None or episode in (rec.get("sample_id"), rec.get("group_id"))):
                out.append(rec)
    return out


def find_tokenizer(run_dir: Path, given: str | None = None):
    """A ``tokenizers.Tokenizer`` for the run's model, or None (the view then shows ids)."""
    candidates = [Path(given)] if given else []
    if not given:
        try:
            cfg = json.loads((Path(run_dir) / "config.json").read_text())
            engine = (cfg.get("learn") or {}).get("engine") or {}
            candidates += [Path(p) for p in (engine.get("model_path"), cfg.get("rollout", {}).get("engine", {}).get("model"))
                           if isinstance(p, str) and p]
        except (OSError, ValueError, AttributeError):
            pass
        candidates.append(Path(run_dir) / "model")
    for c in candidates:
        path = c / "tokenizer.json" if c.is_dir() else c
        if path.is_file():
            try:
                from tokenizers import Tokenizer

                return Tokenizer.from_file(str(path))
            except Exception:  # noqa: BLE001 - no tokenizer (or not this kind): the view shows ids
                continue
    return None


# --- what a record is made of -------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """A run of completion tokens written by one side: ``policy`` (mask 1: a turn of the
    model's, trained on) or ``env`` (mask 0: the environment's or a tool's, masked)."""

    kind: Literal["policy", "env"]
    start: int
    end: int
    turn: int  # the policy's turn; for env tokens, the turn they answer (-1: before the first)


def segments(rec: dict[str, Any]) -> list[Segment]:
    """The completion split where the mask changes and where a turn starts or ends."""
    mask = rec.get("mask") or [1] * len(rec.get("completion_ids", []))
    turns = _turns(rec)
    cuts = {t["start"] for t in turns} | {t["end"] for t in turns}
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start] or i in cuts:
            kind = "policy" if mask[start] else "env"
            turn = sum(1 for t in turns if t["start"] <= start) - 1 if kind == "policy" else \
                sum(1 for t in turns if t["end"] <= start) - 1
            out.append(Segment(kind, start, i, turn))
            start = i
    return out


def _turns(rec: dict[str, Any]) -> list[dict[str, Any]]:
    ep = rec.get("episode")
    if ep and ep.get("turns"):
        return ep["turns"]
    return [{"start": 0, "end": len(rec.get("completion_ids", [])), "policy_version": rec.get("policy_version", 0)}]


def _transcript_text(rec: dict[str, Any], seg: Segment) -> str:
    """A segment's text from the transcript (no tokenizer): the turn's assistant message, or
    the messages that answered it."""
    ep = rec.get("episode")
    if not ep:
        return rec.get("text", "")
    k, out = -1, []
    for role, content in ep.get("transcript", []):
        if role == "assistant":
            k += 1
            if seg.kind == "policy" and k == seg.turn:
                return content
        elif seg.kind == "env" and k == seg.turn and k >= 0:
            out.append(f"{role}: {content}")
    return "\n".join(out)


def _decode(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)


def _mask_runs(mask: list[int]) -> str:
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append(f"{mask[start]}×{i - start}")
            start = i
    return " ".join(runs)


def _turns_n(ep: dict[str, Any]) -> str:
    n = len(ep.get("turns", []))
    return f"{n} turn" if n == 1 else f"{n} turns"


# Control characters of model or environment text (an ANSI escape would restyle or rewrite the
# terminal) are shown as escapes in the text view; newlines and tabs stay.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0)] if c not in (0x09, 0x0a)}


def _clean(s: str) -> str:
    return s.translate(_CONTROLS)


def _json(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, sort_keys=True)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def _adv(rec: dict[str, Any]) -> str:
    a = rec.get("advantage")
    return "-" if a is None else f"{a:+.4f} ({rec.get('advantage_estimator', '?')})"


def _short(xs: list, n: int = 16, fmt=str) -> str:
    shown = " ".join(fmt(x) for x in xs[:n])
    return shown + (f" … (+{len(xs) - n})" if len(xs) > n else "")


# --- text -------------------------------------------------------------------------------
def format_text(records: list[dict[str, Any]], tok=None) -> str:
    return _clean("\n".join(_text_one(rec, tok) for rec in records))


def _text_one(rec: dict[str, Any], tok) -> str:
    v, ep = rec.get("verdict") or {}, rec.get("episode")
    ids, mask, lps = rec.get("completion_ids", []), rec.get("mask", []), rec.get("logprobs", [])
    policy = sum(mask)
    lines = [
        f"━━ step {rec.get('step')} · sample {rec.get('sample_id')} · group {rec.get('group_id')} ━━",
        f"prompt     {_prompt_text(rec.get('prompt'))}".rstrip(),
        f"verdict    reward {v.get('reward')} · {v.get('outcome')} · verifier {v.get('verifier')}"
        f" · answer {_json(v.get('answer'))}" + (f" · components {_json(v['components'])}" if v.get("components") else "")
        + (f" · detail {v['detail']}" if v.get("detail") else ""),
        f"advantage  {_adv(rec)}",
        f"policy     v{rec.get('policy_version')}..v{rec.get('policy_version_max')} · finish {rec.get('finish_reason')}",
    ]
    if ep:
        lines.append(f"episode    {ep.get('environment')} · {_turns_n(ep)} · ended {ep.get('end_reason')}"
                     + (f" ({ep['detail']})" if ep.get("detail") else "")
                     + f" · env reward {ep.get('env_reward')} · tool calls {_json(ep.get('tool_calls', {}))}"
                     f" · tool errors {_json(ep.get('tool_errors', {}))}")
    lines.append(f"tokens     prompt {len(rec.get('prompt_ids', []))} · completion {len(ids)}"
                 f" (policy {policy}, environment {len(ids) - policy})")
    lines.append(f"mask       {_mask_runs(mask)}   (1 = the policy's, trained on; 0 = the environment's, masked)")
    if len(mask) <= 120:
        lines.append(f"           {''.join(map(str, mask))}")
    turns = _turns(rec)
    rewards, infos = (ep or {}).get("turn_rewards", []), (ep or {}).get("info", [])
    for seg in segments(rec):
        text = _decode(tok, ids[seg.start:seg.end]) if tok else _transcript_text(rec, seg)
        span = f"tokens {seg.start}-{seg.end}"
        if seg.kind == "policy":
            t = turns[seg.turn] if 0 <= seg.turn < len(turns) else {}
            head = f"  turn {seg.turn} · policy v{t.get('policy_version', '?')} · {span}"
            if seg.turn < len(rewards):
                head += f" · turn reward {rewards[seg.turn]}"
            if seg.turn < len(infos) and infos[seg.turn]:
                head += f" · info {_json(infos[seg.turn])}"
            lines.append(head)
            lines += [f"  │ {line}" for line in text.splitlines() or [""]]
            lines.append(f"  │ ids {_short(ids[seg.start:seg.end])}")
            lines.append(f"  │ logprobs {_short(lps[seg.start:seg.end], fmt=lambda x: f'{x:.3f}')}")
        else:
            lines.append(f"  [env] {span} (masked)")
            lines += [f"  [env] {line}" for line in text.splitlines() or [""]]
            lines.append(f"  [env] ids {_short(ids[seg.start:seg.end])}")
    if ep and ep.get("transcript"):
        lines.append("transcript")
        lines += [f"  {role}: {content}" for role, content in ep["transcript"]]
    return "\n".join(lines) + "\n"


# --- html -------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
section{background:#fff;border:1px solid #d8dde6;border-radius:8px;padding:14px 18px;margin:0 0 18px}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;margin:4px 0 10px}td{padding:1px 12px 1px 0;vertical-align:top}
td:first-child{color:#5b6578}
pre,.seg{font:13px/1.5 ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-word}
pre{background:#f3f5f8;padding:6px 8px;border-radius:4px;margin:2px 0}
.seg{border-radius:4px;padding:6px 8px;margin:4px 0;border-left:4px solid}
.policy{background:#eef8ee;border-color:#3c9a4a}.env{background:#fff3d6;border-color:#c98a0b;margin-left:28px}
.label{font:12px system-ui,sans-serif;color:#5b6578;display:block;margin-bottom:2px}
.tok{border-bottom:1px dotted #9aa3b2}.ids{color:#5b6578;font-size:12px}
.ok{color:#23803a;font-weight:600}.bad{color:#b3261e;font-weight:600}
.legend span{padding:2px 8px;border-radius:4px;margin-right:8px}
"""


def format_html(records: list[dict[str, Any]], tok=None, title: str = "rlvr samples") -> str:
    e = html.escape
    body = [f"<h1 style='font-size:18px'>{e(title)}</h1>",
            "<p class='legend'><span class='policy'>policy tokens: mask 1, trained on</span>"
            "<span class='env'>environment tokens: mask 0, masked</span>"
            + ("hover a token for its id and log-prob" if tok else "no tokenizer found (--tokenizer): text from the "
               "transcript, tokens as ids") + "</p>"]
    body += [_html_one(rec, tok) for rec in records]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{e(title)}</title><style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _html_one(rec: dict[str, Any], tok) -> str:
    e = html.escape
    v, ep = rec.get("verdict") or {}, rec.get("episode")
    ids, mask, lps = rec.get("completion_ids", []), rec.get("mask", []), rec.get("logprobs", [])
    good = "ok" if v.get("outcome") == "ok" else "bad"
    rows = [
        ("reward", f"<span class='{good}'>{e(str(v.get('reward')))} · {e(str(v.get('outcome')))}</span>"
                   f" · verifier {e(str(v.get('verifier')))} · answer {e(_json(v.get('answer')))}"),
        ("advantage", e(_adv(rec))),
        ("policy", e(f"v{rec.get('policy_version')}..v{rec.get('policy_version_max')} · finish "
                     f"{rec.get('finish_reason')} · {sum(mask)} policy tokens, {len(mask) - sum(mask)} environment")),
        ("mask", e(_mask_runs(mask))),
    ]
    if v.get("components") or v.get("detail"):
        rows.append(("verdict", e(f"components {_json(v.get('components', {}))} {v.get('detail', '')}")))
    if ep:
        rows.append(("episode", e(f"{ep.get('environment')} · {_turns_n(ep)} · ended "
                                  f"{ep.get('end_reason')} {ep.get('detail', '')} · env reward {ep.get('env_reward')}")))
        rows.append(("tools", e(f"calls {_json(ep.get('tool_calls', {}))} · errors {_json(ep.get('tool_errors', {}))}")))
    out = [f"<section><h2>step {e(str(rec.get('step')))} · {e(str(rec.get('sample_id')))}"
           f" <span class='ids'>group {e(str(rec.get('group_id')))}</span></h2><table>"]
    out += [f"<tr><td>{k}</td><td>{val}</td></tr>" for k, val in rows]
    out.append(f"</table><span class='label'>prompt</span><pre>{e(_prompt_text(rec.get('prompt')))}</pre>")
    turns = _turns(rec)
    rewards, infos = (ep or {}).get("turn_rewards", []), (ep or {}).get("info", [])
    for seg in segments(rec):
        if seg.kind == "policy":
            t = turns[seg.turn] if 0 <= seg.turn < len(turns) else {}
            label = f"turn {seg.turn} · policy v{t.get('policy_version', '?')} · tokens {seg.start}-{seg.end}"
            if seg.turn < len(rewards):
                label += f" · turn reward {rewards[seg.turn]}"
            if seg.turn < len(infos) and infos[seg.turn]:
                label += f" · info {_json(infos[seg.turn])}"
        else:
            label = f"environment · tokens {seg.start}-{seg.end} · masked"
        if tok:
            content = "".join(
                f"<span class='tok' title='{e(f'id {i} · logprob {lp:.3f}' if seg.kind == 'policy' else f'id {i}')}'>"
                f"{e(_decode(tok, [i]))}</span>" for i, lp in zip(ids[seg.start:seg.end], lps[seg.start:seg.end]))
        else:
            content = (f"{e(_transcript_text(rec, seg))}\n<span class='ids'>ids {e(_short(ids[seg.start:seg.end], 64))}"
                       + (f"\nlogprobs {e(_short(lps[seg.start:seg.end], 64, lambda x: f'{x:.3f}'))}"
                          if seg.kind == "policy" else "") + "</span>")
        out.append(f"<div class='seg {seg.kind}'><span class='label'>{e(label)}</span>{content}</div>")
    if ep and ep.get("transcript"):
        convo = "\n".join(f"{role}: {content}" for role, content in ep["transcript"])
        out.append(f"<details><summary>transcript</summary><pre>{e(convo)}</pre></details>")
    return "".join(out) + "</section>"


# --- the command -------------------------------------------------------------------------
def run(args: Args) -> int:
    run_dir = Path(args.run_dir)
    try:
        records = read_records(run_dir, args.step, args.episode)
    except SamplesMissingError as err:
        print(f"rlvr-actor samples: {err}", file=sys.stderr)
        return 2
    if not records:
        print(f"rlvr-actor samples: no sample {args.episode!r} in {run_dir}", file=sys.stderr)
        return 1
    if args.limit > 0:
        records = records[: args.limit]
    if args.format == "jsonl":
        out = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    else:
        tok = find_tokenizer(run_dir, args.tokenizer)
        out = format_text(records, tok) if args.format == "text" else format_html(records, tok, f"samples of {run_dir}")
    if args.output:
        Path(args.output).write_text(out, encoding="utf-8")
        print(f"{len(records)} samples -> {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0
