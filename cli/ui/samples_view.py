"""How ``rlvr-actor samples`` shows a dumped sample: in a terminal (text) or one web page (html).

A record (learner/watch/sample_dump.py) is what the learner trained for one sample: one sequence, or
for an agent's episode of several segments one sequence per segment (the Sample's own, its last model
turn's, in the record's own fields; the others in ``episode.segments``). Each segment
is shown whole: its own prompt, its loss mask, its turns with their behaviour log-probs, and the
environment's or agent's tokens set apart; the tokens counted for a record, and for a step, are those
of every sequence, as the learner's ``tokens`` and ``response_tokens`` count them.

A prompt is shown as its ids decode, so the text always agrees with ``prompt_ids``: with a tokenizer,
decoded; without one, the task's prompt where the ids are its rendering, and the ids where they are
an agent's own request (an agent renders, compacts or edits its history itself). Model and
environment text is untrusted: control characters are escaped in the text view, everything is
escaped in the page, and the page loads nothing.

Not here: finding and reading the files, the tokenizer (cli/commands/samples.py).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any, Literal


# --- what a record is made of -------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """One sequence the learner trained for a sample: ``item`` is its id in the step's batch
    (learner/train/batching.py ``sample_items``); ``own`` marks the Sample's own segment."""

    item: str
    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    turns: list[dict[str, Any]]
    own: bool

    @property
    def policy(self) -> int:
        return sum(self.mask)


@dataclass(frozen=True)
class Span:
    """A run of a segment's completion tokens written by one side: ``policy`` (mask 1: a turn of the
    model's, trained on) or ``env`` (mask 0: the environment's, a tool's or the agent's, masked)."""

    kind: Literal["policy", "env"]
    start: int
    end: int
    turn: int  # the policy's turn; for env tokens, the turn they answer (-1: before the first)


def segments(rec: dict[str, Any]) -> list[Segment]:
    """Every sequence of a record, in the order they started: an agent's other segments, then the
    Sample's own (a dump from before segments were recorded has the own one only)."""
    ep = rec.get("episode") or {}
    sid = str(rec.get("sample_id"))
    out = [_segment(g, f"{sid}#segment-{k + 1}", g.get("turns") or [], own=False)
           for k, g in enumerate(ep.get("segments") or [])]
    own_turns = ep.get("turns") or [{"start": 0, "end": len(rec.get("completion_ids", [])),
                                     "policy_version": rec.get("policy_version", 0)}]
    return [*out, _segment(rec, sid, own_turns, own=True)]


def _segment(d: dict[str, Any], item: str, turns: list[dict[str, Any]], *, own: bool) -> Segment:
    ids = d.get("completion_ids") or []
    return Segment(item, d.get("prompt_ids") or [], ids, d.get("mask") or [1] * len(ids), d.get("logprobs") or [],
                   turns, own)


def spans(seg: Segment) -> list[Span]:
    """A segment's completion split where the mask changes and where a turn starts or ends."""
    mask, turns = seg.mask, seg.turns
    cuts = {t["start"] for t in turns} | {t["end"] for t in turns}
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start] or i in cuts:
            kind = "policy" if mask[start] else "env"
            turn = sum(1 for t in turns if t["start"] <= start) - 1 if kind == "policy" else \
                sum(1 for t in turns if t["end"] <= start) - 1
            out.append(Span(kind, start, i, turn))
            start = i
    return out


@dataclass
class Tokens:
    """What a record, or a step's records, trained: the learner's ``tokens`` is ``prompt + completion``
    and its ``response_tokens`` is ``policy``."""

    samples: int = 0
    sequences: int = 0
    prompt: int = 0
    completion: int = 0
    policy: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def add(self, rec: dict[str, Any]) -> Tokens:
        self.samples += 1
        for seg in segments(rec):
            self.sequences += 1
            self.prompt += len(seg.prompt_ids)
            self.completion += len(seg.completion_ids)
            self.policy += seg.policy
        return self

    def text(self) -> str:
        return (f"{self.total} tokens trained (prompt {self.prompt} · completion {self.completion}: policy "
                f"{self.policy}, environment {self.completion - self.policy})")


def step_tokens(records: list[dict[str, Any]]) -> dict[int, Tokens]:
    """Each step's totals over the records given (a whole step's: the learner's ``tokens`` for it)."""
    out: dict[int, Tokens] = {}
    for rec in records:
        out.setdefault(rec.get("step"), Tokens()).add(rec)
    return out


# --- shared pieces ------------------------------------------------------------------------
def _turn_text(rec: dict[str, Any], seg: Segment, span: Span) -> str:
    """A span's text from the transcript (no tokenizer), which holds the own segment's conversation (an
    agent's: its last request and reply) and may have lost its start to its bound: turn k of T is the
    k-th of the last T assistant messages; an environment span is the messages after its turn's."""
    ep = rec.get("episode")
    if not ep:
        return rec.get("text", "") if seg.own else ""
    if not seg.own:  # only the own segment's conversation is in the transcript
        return "(no text recorded for an earlier segment: --tokenizer decodes its ids)"
    transcript = ep.get("transcript") or []
    assistant = [i for i, (role, _) in enumerate(transcript) if role == "assistant"]
    k = len(assistant) - len(seg.turns) + span.turn
    if span.kind == "policy":
        return transcript[assistant[k]][1] if 0 <= k < len(assistant) else ""
    if not 0 <= k < len(assistant):
        return ""
    after = transcript[assistant[k] + 1: assistant[k + 1] if k + 1 < len(assistant) else len(transcript)]
    return "\n".join(f"{role}: {content}" for role, content in after)


def _prompt(rec: dict[str, Any], seg: Segment, tok) -> str:
    """The segment's prompt as its ids say it; '' where only the ids can say it (no tokenizer)."""
    if tok is not None:
        return _decode(tok, seg.prompt_ids)
    if seg.own and not (rec.get("episode") or {}).get("agent"):
        return _prompt_text(rec.get("prompt"))  # the ids are the task's prompt rendered
    return ""  # an agent's request: its own rendering of a history it may have edited


def _undecoded(rec: dict[str, Any]) -> str:
    agent = (rec.get("episode") or {}).get("agent")
    return "the agent's request: --tokenizer decodes it" if agent else "--tokenizer decodes them"


def _decode(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)


def _mask_runs(mask: list[int]) -> str:
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append(f"{mask[start]}×{i - start}")
            start = i
    return " ".join(runs)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _episode_line(ep: dict[str, Any], segs: list[Segment]) -> str:
    # The turns of the whole episode: every segment's.
    shape = _plural(sum(len(s.turns) for s in segs), "turn") + (f" in {len(segs)} segments" if len(segs) > 1 else "")
    return (f"{ep.get('environment')} · {shape} · ended {ep.get('end_reason')}"
            + (f" ({ep['detail']})" if ep.get("detail") else ""))


def _turn_label(rec: dict[str, Any], seg: Segment, span: Span) -> str:
    t = seg.turns[span.turn] if 0 <= span.turn < len(seg.turns) else {}
    label = f"turn {span.turn} · policy v{t.get('policy_version', '?')} · tokens {span.start}-{span.end}"
    ep = rec.get("episode") or {}
    if seg.own:  # the episode's turn rewards and info are the own segment's turns'
        rewards, infos = ep.get("turn_rewards", []), ep.get("info", [])
        if span.turn < len(rewards):
            label += f" · turn reward {rewards[span.turn]}"
        if span.turn < len(infos) and infos[span.turn]:
            label += f" · info {_json(infos[span.turn])}"
    return label


def _step_line(step: Any, t: Tokens) -> str:
    return f"step {step} · {_plural(t.samples, 'sample')} · {_plural(t.sequences, 'sequence')} · {t.text()}"


def _segment_label(seg: Segment, k: int, n: int) -> str:
    own = " · the last model turn's: what the verifier read" if seg.own else ""
    return f"segment {k + 1} of {n} · trained as {seg.item}{own} · {_plural(len(seg.turns), 'turn')}"


def _segment_tokens(seg: Segment) -> str:
    return (f"prompt {len(seg.prompt_ids)} · completion {len(seg.completion_ids)} (policy {seg.policy}, "
            f"environment {len(seg.completion_ids) - seg.policy})")


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


def _lp(x: float) -> str:
    return f"{x:.3f}"


# --- text -------------------------------------------------------------------------------
def format_text(records: list[dict[str, Any]], tok=None, steps: dict[int, Tokens] | None = None) -> str:
    """The records for a terminal; ``steps``: each step's totals, said before its first record."""
    out, said = [], set()
    for rec in records:
        step = rec.get("step")
        if steps and step in steps and step not in said:
            said.add(step)
            out.append(f"══ {_step_line(step, steps[step])} ══\n")
        out.append(_text_one(rec, tok))
    return _clean("\n".join(out))


def _text_one(rec: dict[str, Any], tok) -> str:
    v, ep = rec.get("verdict") or {}, rec.get("episode")
    segs = segments(rec)
    whole = Tokens().add(rec)
    alone = len(segs) == 1
    lines = [f"━━ step {rec.get('step')} · sample {rec.get('sample_id')} · group {rec.get('group_id')} ━━"]
    if not alone or (ep or {}).get("agent"):
        lines.append(f"task       {_indent(_prompt_text(rec.get('prompt')))}".rstrip())  # what the agent was given
    if alone:
        lines.append(_text_prompt(rec, segs[0], tok))
    lines += [
        f"verdict    reward {v.get('reward')} · {v.get('outcome')} · verifier {v.get('verifier')}"
        f" · answer {_json(v.get('answer'))}" + (f" · components {_json(v['components'])}" if v.get("components") else "")
        + (f" · detail {v['detail']}" if v.get("detail") else ""),
        f"advantage  {_adv(rec)}",
        f"policy     v{rec.get('policy_version')}..v{rec.get('policy_version_max')} · finish {rec.get('finish_reason')}",
    ]
    if ep:
        lines.append(f"episode    {_episode_line(ep, segs)} · env reward {ep.get('env_reward')} · tool calls "
                     f"{_json(ep.get('tool_calls', {}))} · tool errors {_json(ep.get('tool_errors', {}))}")
    if alone:
        lines.append(f"tokens     {whole.total} trained: {_segment_tokens(segs[0])}")
        lines += _text_segment(rec, segs[0], tok)
    else:
        lines.append(f"tokens     {whole.text()} in {len(segs)} sequences")
    for k, seg in enumerate(segs if not alone else []):
        lines.append(f"── {_segment_label(seg, k, len(segs))} ──")
        lines += [_text_prompt(rec, seg, tok), f"tokens     {_segment_tokens(seg)}", *_text_segment(rec, seg, tok)]
    if ep and ep.get("transcript"):
        lines.append("transcript" + ("" if alone else " (the last segment's)"))
        lines += [f"  {role}: {content}" for role, content in ep["transcript"]]
    return "\n".join(lines) + "\n"


def _text_prompt(rec: dict[str, Any], seg: Segment, tok) -> str:
    prompt = _indent(_prompt(rec, seg, tok))
    return f"prompt     {prompt}".rstrip() if prompt else f"prompt     ids {_short(seg.prompt_ids, 32)}   ({_undecoded(rec)})"


def _indent(text: str) -> str:
    return text.replace("\n", "\n" + " " * 11)  # a prompt's lines (a chat template's) under its first


def _text_segment(rec: dict[str, Any], seg: Segment, tok) -> list[str]:
    """A segment's mask and turns (its prompt and counts are said by the caller)."""
    ids, mask, lps = seg.completion_ids, seg.mask, seg.logprobs
    lines = [f"mask       {_mask_runs(mask)}   (1 = the policy's, trained on; 0 = the environment's, masked)"]
    if len(mask) <= 120:
        lines.append(f"           {''.join(map(str, mask))}")
    for span in spans(seg):
        text = _decode(tok, ids[span.start:span.end]) if tok else _turn_text(rec, seg, span)
        if span.kind == "policy":
            lines.append(f"  {_turn_label(rec, seg, span)}")
            lines += [f"  │ {line}" for line in text.splitlines() or [""]]
            lines.append(f"  │ ids {_short(ids[span.start:span.end])}")
            lines.append(f"  │ logprobs {_short(lps[span.start:span.end], fmt=_lp)}")
        else:
            lines.append(f"  [env] tokens {span.start}-{span.end} (masked)")
            lines += [f"  [env] {line}" for line in text.splitlines() or [""]]
            lines.append(f"  [env] ids {_short(ids[span.start:span.end])}")
    return lines


# --- html -------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
section{background:#fff;border:1px solid #d8dde6;border-radius:8px;padding:14px 18px;margin:0 0 18px}
h2{font-size:15px;margin:0 0 8px}h3{font-size:14px;margin:14px 0 4px;color:#3a4356}
table{border-collapse:collapse;margin:4px 0 10px}td{padding:1px 12px 1px 0;vertical-align:top}
td:first-child{color:#5b6578}
pre,.seg{font:13px/1.5 ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-word}
pre{background:#f3f5f8;padding:6px 8px;border-radius:4px;margin:2px 0}
.seg{border-radius:4px;padding:6px 8px;margin:4px 0;border-left:4px solid}
.policy{background:#eef8ee;border-color:#3c9a4a}.env{background:#fff3d6;border-color:#c98a0b;margin-left:28px}
.label{font:12px system-ui,sans-serif;color:#5b6578;display:block;margin-bottom:2px}
.tok{border-bottom:1px dotted #9aa3b2}.ids{color:#5b6578;font-size:12px}
.ok{color:#23803a;font-weight:600}.bad{color:#b3261e;font-weight:600}
.legend span{padding:2px 8px;border-radius:4px;margin-right:8px}.step{font-weight:600}
"""


def format_html(records: list[dict[str, Any]], tok=None, title: str = "rlvr samples",
                steps: dict[int, Tokens] | None = None) -> str:
    e = html.escape
    body = [f"<h1 style='font-size:18px'>{e(title)}</h1>",
            "<p class='legend'><span class='policy'>policy tokens: mask 1, trained on</span>"
            "<span class='env'>environment tokens: mask 0, masked</span>"
            + ("hover a token for its id and log-prob" if tok else "no tokenizer found (--tokenizer): text from the "
               "transcript, tokens as ids") + "</p>"]
    said = set()
    for rec in records:
        step = rec.get("step")
        if steps and step in steps and step not in said:
            said.add(step)
            body.append(f"<p class='step'>{e(_step_line(step, steps[step]))}</p>")
        body.append(_html_one(rec, tok))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{e(title)}</title><style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _html_one(rec: dict[str, Any], tok) -> str:
    e = html.escape
    v, ep = rec.get("verdict") or {}, rec.get("episode")
    segs = segments(rec)
    whole = Tokens().add(rec)
    good = "ok" if v.get("outcome") == "ok" else "bad"
    rows = [
        ("reward", f"<span class='{good}'>{e(str(v.get('reward')))} · {e(str(v.get('outcome')))}</span>"
                   f" · verifier {e(str(v.get('verifier')))} · answer {e(_json(v.get('answer')))}"),
        ("advantage", e(_adv(rec))),
        ("policy", e(f"v{rec.get('policy_version')}..v{rec.get('policy_version_max')} · finish "
                     f"{rec.get('finish_reason')}")),
        ("tokens", e(whole.text() + (f" in {len(segs)} sequences" if len(segs) > 1 else ""))),
    ]
    if v.get("components") or v.get("detail"):
        rows.append(("verdict", e(f"components {_json(v.get('components', {}))} {v.get('detail', '')}")))
    if ep:
        rows.append(("episode", e(f"{_episode_line(ep, segs)} · env reward {ep.get('env_reward')}")))
        rows.append(("tools", e(f"calls {_json(ep.get('tool_calls', {}))} · errors {_json(ep.get('tool_errors', {}))}")))
    if len(segs) > 1 or (ep or {}).get("agent"):
        rows.append(("task", f"<pre>{e(_prompt_text(rec.get('prompt')))}</pre>"))
    out = [f"<section><h2>step {e(str(rec.get('step')))} · {e(str(rec.get('sample_id')))}"
           f" <span class='ids'>group {e(str(rec.get('group_id')))}</span></h2><table>"]
    out += [f"<tr><td>{k}</td><td>{val}</td></tr>" for k, val in rows]
    out.append("</table>")
    for k, seg in enumerate(segs):
        if len(segs) > 1:
            out.append(f"<h3>{e(_segment_label(seg, k, len(segs)))}</h3>")
        out.append(_html_segment(rec, seg, tok))
    if ep and ep.get("transcript"):
        convo = "\n".join(f"{role}: {content}" for role, content in ep["transcript"])
        which = " (the last segment's)" if len(segs) > 1 else ""
        out.append(f"<details><summary>transcript{which}</summary><pre>{e(convo)}</pre></details>")
    return "".join(out) + "</section>"


def _html_segment(rec: dict[str, Any], seg: Segment, tok) -> str:
    e = html.escape
    ids, lps = seg.completion_ids, seg.logprobs
    prompt = _prompt(rec, seg, tok)
    shown = e(prompt) if prompt else f"<span class='ids'>ids {e(_short(seg.prompt_ids, 64))} ({e(_undecoded(rec))})</span>"
    out = [f"<span class='label'>prompt · tokens: {e(_segment_tokens(seg))} · mask {e(_mask_runs(seg.mask))}</span>"
           f"<pre>{shown}</pre>"]
    for span in spans(seg):
        label = _turn_label(rec, seg, span) if span.kind == "policy" else \
            f"environment · tokens {span.start}-{span.end} · masked"
        if tok:
            content = "".join(
                f"<span class='tok' title='{e(f'id {i} · logprob {lp:.3f}' if span.kind == 'policy' else f'id {i}')}'>"
                f"{e(_decode(tok, [i]))}</span>" for i, lp in zip(ids[span.start:span.end], lps[span.start:span.end]))
        else:
            content = (f"{e(_turn_text(rec, seg, span))}\n<span class='ids'>ids {e(_short(ids[span.start:span.end], 64))}"
                       + (f"\nlogprobs {e(_short(lps[span.start:span.end], 64, _lp))}"
                          if span.kind == "policy" else "") + "</span>")
        out.append(f"<div class='seg {span.kind}'><span class='label'>{e(label)}</span>{content}</div>")
    return "".join(out)


__all__ = ["Segment", "Span", "Tokens", "format_html", "format_text", "segments", "spans", "step_tokens"]
