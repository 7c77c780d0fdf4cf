"""Model-judged rewards: ``llm_judge`` (a model behind an OpenAI-compatible endpoint) and ``hybrid``.

**llm_judge** asks a model the user serves (``vllm serve MODEL``, or any
OpenAI-compatible server) to grade a completion: ``rubric`` is the prompt, with
``{prompt}``, ``{completion}`` and ``{gold}`` replaced; the first number in the
judge's answer is the score, divided by ``scale`` and clipped to [0, 1]
(partial credit reaches the learner unchanged). It speaks plain HTTP through
httpx (no SDK, no torch): ``/chat/completions``, or ``/completions`` for a
model without a chat template.

Every failure is an outcome, never a silent 0:

- no answer within ``timeout_s`` (or the pool's budget, whichever is less):
  ``timeout``;
- an answer with no number, or a number outside [0, scale]: ``parse_error``,
  quoting the answer;
- a refused request (4xx), or a server still failing after ``retries``
  retries of transient faults (connection errors, 429, 5xx): ``error``.

The key, if the server wants one, is read from ``api_key_file`` (its first
line) in the worker, and registered for redaction: it never reaches a log, a
verdict or a trace. A worker's environment is scrubbed, so there is no
environment-variable form.

**hybrid** runs a rule-based verifier first and asks the judge only when the
rules cannot decide (``parse_error``; VerIF's split: rules where they apply,
a model for the rest). ``components`` say which one decided.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from rlvr.protocol.samples import Verdict
from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.registry import Verifier, VerifyContext, resolve

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
DEFAULT_RUBRIC = (
    "You grade answers. Question:\n{prompt}\n\nReference answer: {gold}\n\nAnswer to grade:\n{completion}\n\n"
    "How correct is the answer, from 0 (wrong) to 10 (fully right)? Reply with the number only."
)


class JudgeParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The server's base URL, e.g. "http://127.0.0.1:8000/v1".
    url: str
    # The model name the server serves.
    model: str
    # The judge's prompt; {prompt}, {completion} and {gold} are replaced.
    rubric: str = DEFAULT_RUBRIC
    # The reference answer shown to the judge ("{gold}" from the dataset).
    gold: str = ""
    # "chat": /chat/completions with the rubric as the user message; "completions": raw text.
    endpoint: Literal["chat", "completions"] = "chat"
    # The score's scale: the judge's number divided by this is the reward.
    scale: Annotated[float, Meta(gt=0)] = 10.0
    # Seconds for one request (the pool's own timeout bounds all of them together).
    timeout_s: Annotated[float, Meta(gt=0)] = 30.0
    # Retries of transient faults (connection errors, 429, 5xx), with exponential back-off.
    retries: Annotated[int, Meta(ge=0, le=10)] = 2
    max_tokens: Annotated[int, Meta(ge=1)] = 16
    temperature: Annotated[float, Meta(ge=0)] = 0.0
    # A file holding the server's API key (first line); "" sends none.
    api_key_file: str = ""
    # More request fields, passed as they are (vLLM's structured_outputs, say).
    extra_body: dict[str, Any] = {}
    # Characters of the completion shown to the judge (the end is kept: the answer is there).
    max_completion_chars: Annotated[int, Meta(gt=0)] = 8_000


class _Transient(Exception):
    """A fault worth retrying (connection, 429, 5xx)."""


def _prompt_text(ctx: VerifyContext) -> str:
    if isinstance(ctx.prompt, list):
        return "\n".join(m.content for m in ctx.prompt if m.role != "system")
    return ctx.prompt or ""


def _request(p: JudgeParams, completion: str, ctx: VerifyContext) -> tuple[str, dict[str, Any]]:
    text = (p.rubric.replace("{prompt}", _prompt_text(ctx)).replace("{gold}", p.gold)
            .replace("{completion}", completion[-p.max_completion_chars:]))
    body: dict[str, Any] = {"model": p.model, "max_tokens": p.max_tokens, "temperature": p.temperature,
                            **p.extra_body}
    if p.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return f"{p.url.rstrip('/')}/{'chat/completions' if p.endpoint == 'chat' else 'completions'}", body


def _api_key(p: JudgeParams) -> str | None:
    if not p.api_key_file:
        return None
    from rlvr.actors.secrets import register_secret

    key = Path(p.api_key_file).read_text().splitlines()[0].strip()
    register_secret(key)
    return key


def ask(p: JudgeParams, completion: str, ctx: VerifyContext) -> tuple[str | None, str, str]:
    """(the judge's answer, outcome if it failed, detail)."""
    import httpx
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    from rlvr.actors.secrets import redact

    url, body = _request(p, completion, ctx)
    key = _api_key(p)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    started = time.monotonic()
    budget = ctx.budget_s if ctx.budget_s is not None else math.inf

    def once() -> str:
        left = budget - (time.monotonic() - started) - 0.5  # finish inside the pool's deadline
        if left <= 0:
            raise httpx.TimeoutException("the pool's time budget is spent")
        try:
            r = httpx.post(url, json=body, headers=headers, timeout=min(p.timeout_s, left))
        except httpx.TimeoutException:
            raise
        except httpx.TransportError as e:
            raise _Transient(f"{type(e).__name__}: {e}") from e
        if r.status_code == 429 or r.status_code >= 500:
            raise _Transient(f"HTTP {r.status_code}: {r.text[:200]}")
        if r.status_code >= 400:
            raise ValueError(f"HTTP {r.status_code}: {r.text[:300]}")
        choice = r.json()["choices"][0]
        return choice["message"]["content"] if p.endpoint == "chat" else choice["text"]

    try:
        for attempt in Retrying(stop=stop_after_attempt(p.retries + 1), reraise=True,
                                wait=wait_exponential(multiplier=0.2, max=5.0),
                                retry=retry_if_exception_type(_Transient)):
            with attempt:
                return once(), "", ""
    except httpx.TimeoutException as e:
        return None, "timeout", redact(f"the judge did not answer in time ({e})")
    except _Transient as e:
        return None, "error", redact(f"the judge at {p.url} kept failing after {p.retries} retries: {e}")
    except (ValueError, KeyError, IndexError, TypeError) as e:  # refused, or not an OpenAI answer
        return None, "error", redact(f"the judge's request failed: {type(e).__name__}: {e}"[:2000])
    raise AssertionError("unreachable")  # pragma: no cover


def score_answer(answer: str, scale: float) -> float | None:
    """The first number of the answer over ``scale``; None when there is none or it is out of range."""
    m = _NUMBER.search(answer)
    if m is None:
        return None
    x = float(m.group())
    return x / scale if 0 <= x <= scale else None


def _judge(completion: str, p: JudgeParams, ctx: VerifyContext) -> Verdict:
    started = time.perf_counter()
    answer, failed, detail = ask(p, completion, ctx)
    latency = time.perf_counter() - started
    if answer is None:
        return Verdict(0.0, failed, "llm_judge", detail=detail, latency_s=latency)  # type: ignore[arg-type]
    score = score_answer(answer, p.scale)
    if score is None:
        return Verdict(0.0, "parse_error", "llm_judge", latency_s=latency,
                       detail=f"the judge answered {answer[:300]!r}: no score in [0, {p.scale:g}]")
    return Verdict(score, "ok" if score >= 0.5 else "wrong", "llm_judge", components={"judge": score},
                   extracted=answer.strip()[:200], latency_s=latency)


class HybridParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The rule-based verifier asked first (math, exact, code ...).
    rules: VerifierSpec
    # The judge's parameters, asked only when the rules return parse_error.
    judge: JudgeParams


def _hybrid(completion: str, p: HybridParams, ctx: VerifyContext) -> Verdict:
    ruled = resolve(p.rules)(completion, ctx)
    if ruled.outcome != "parse_error":
        return Verdict(ruled.reward, ruled.outcome, "hybrid", components={**ruled.components, "by_rules": 1.0},
                       extracted=ruled.extracted, latency_s=ruled.latency_s, detail=ruled.detail, steps=ruled.steps)
    judged = _judge(completion, p.judge, ctx)
    return Verdict(judged.reward, judged.outcome, "hybrid",
                   components={**judged.components, "by_rules": 0.0, "by_judge": 1.0},
                   extracted=judged.extracted, latency_s=ruled.latency_s + judged.latency_s,
                   detail=f"rules could not decide ({ruled.detail[:200]}); judge: {judged.detail}"[:2000])


def _check_hybrid(p: HybridParams) -> None:
    if p.rules.name in ("hybrid", "llm_judge"):
        raise ValueError("hybrid's rules must be a rule-based verifier, not another judge")
    resolve(p.rules)


LLM_JUDGE = Verifier("llm_judge", JudgeParams, _judge)
HYBRID = Verifier("hybrid", HybridParams, _hybrid, check=_check_hybrid)
