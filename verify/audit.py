"""Offline verifier audit (``rlvr-actor audit``, ``rlvr.cli.commands.audit``): labelled cases through a verifier.

Run a verifier over labelled cases before training on it, through the same
``VerifierPool`` (worker processes, hard timeout) the verifier actor uses.

Input: JSON lines, or records from Parquet, JSON or a Hugging Face dataset
(the command reads those as the learner reads a dataset), each with ``id``, ``response`` (a full model response
or a bare answer), ``gold`` (``tests`` for code), an optional ``label`` (true
when the response is correct) and optional ``params`` (merged over the
command's ``--params``); for reward functions that read more, optional
``prompt``, ``record`` (TRL's columns, verl's ``data_source`` and
``extra_info``), ``dataset`` and ``completion_ids`` (TRL's). ``gold`` /
``tests`` go into the verifier's params; for ``composite`` into its first
(accuracy) part. A case without ``gold`` for a verl function, which always
takes a ground truth, is a ``spec_error`` that names the case, and the
command exits 1.

Output, one line per case in input order: ``id, reward, outcome, extracted,
latency_ms`` (and ``detail`` when the verifier gave one, and ``route`` when
that detail names how the answer was found: the math verifier's
``route=boxed``, ``bare``, ``prose``, ``last_number`` ...). The summary
counts the routes, so a user sees why answers were judged wrong. A case
whose spec is invalid gets outcome ``spec_error`` and never reaches a worker.

A case counts as judged correct when its outcome is ``ok``; a timeout or a
sandbox error counts as judged wrong, since that is what training would see.
This module does not build cases or decide thresholds for a given dataset.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
from msgspec import Struct

from rlvr.actors.meters import quantile
from rlvr.protocol.tasks import ChatMessage, VerifierSpec
from rlvr.verify.registry import VerifierSpecError, VerifyContext, get, import_paths, load_plugins

SPEC_ERROR = "spec_error"


class AuditCase(Struct, frozen=True):
    id: str | int
    response: str
    gold: Any = None
    tests: Any = None
    label: bool | None = None
    params: dict[str, Any] = {}
    # What a reward function may read besides the gold (VerifyContext): the prompt (text
    # or [{role, content}] messages) and the record's other fields (TRL's columns,
    # verl's data_source and extra_info).
    prompt: str | list[dict[str, str]] | None = None
    record: dict[str, Any] = {}
    dataset: str = ""
    # The response's token ids, for functions that read them (TRL's completion_ids); a function
    # that declares completion_ids scores a case without them as an error, never as a length of 0.
    completion_ids: list[int] = []

    def context(self) -> VerifyContext:
        prompt = self.prompt
        if isinstance(prompt, list):
            prompt = [ChatMessage(m["role"], m["content"]) for m in prompt]  # type: ignore[arg-type]
        return VerifyContext(prompt=prompt, record=self.record, dataset=self.dataset,
                             completion_ids=self.completion_ids)


class AuditRow(Struct, frozen=True, omit_defaults=True):
    id: str
    reward: float
    outcome: str
    extracted: str | None
    latency_ms: float
    detail: str = ""
    route: str = ""


def route_of(detail: str) -> str:
    """The extraction route a verifier's detail starts with (``route=NAME;``), or ""."""
    if not detail.startswith("route="):
        return ""
    return detail[len("route=") :].split(";", 1)[0].strip()


class AuditSummary(Struct, frozen=True):
    verifier: str
    cases: int
    elapsed_s: float  # verifying only; starting the worker pool is not counted
    cases_per_s: float
    outcomes: dict[str, int]
    latency_p50_ms: float
    latency_p99_ms: float
    labelled: int
    positives: int
    negatives: int
    agreement: float | None  # share of labelled cases where verdict == label
    false_negative_rate: float | None  # over positives: correct responses judged wrong
    false_positive_rate: float | None  # over negatives: wrong responses judged correct
    false_negatives: list[str]
    false_positives: list[str]
    spec_errors: list[str]
    routes: dict[str, int] = {}  # how answers were found, where the verifier says
    # Cases the verifier could not judge (error, timeout, sandbox_error, spec_error), and the
    # misjudged ones, each with its outcome and the verifier's reason (the first 50 of each).
    failed: list[dict[str, str]] = []
    misjudged: list[dict[str, str]] = []


class AuditInputInvalidError(ValueError):
    """An input file that cannot be read as audit cases; names the line."""


def read_cases(path: Path) -> list[AuditCase]:
    """The cases of a JSON-lines file (``cases_from_records`` takes records read any other way)."""
    cases = []
    decoder = msgspec.json.Decoder(AuditCase)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise AuditInputInvalidError(f"{path} is not UTF-8 text: a Parquet or Arrow file is read by "
                                     "`rlvr-actor audit` (its --input), not by read_cases") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            cases.append(decoder.decode(line))
        except msgspec.DecodeError as e:
            raise AuditInputInvalidError(f"{path}:{lineno}: {e}") from None
    return cases


def cases_from_records(records: list[dict[str, Any]], source: str) -> list[AuditCase]:
    """Audit cases from records read from a Parquet, JSON or Hugging Face dataset (``source`` names it)."""
    cases = []
    for i, r in enumerate(records):
        try:
            cases.append(msgspec.convert(r, AuditCase))
        except msgspec.ValidationError as e:
            raise AuditInputInvalidError(f"{source} record {i}: {e}") from None
    return cases


def case_spec(verifier: str, case: AuditCase, params: dict[str, Any] | None) -> VerifierSpec:
    """The spec for one case: ``params``, then the case's params, then gold/tests."""
    merged: dict[str, Any] = {**(params or {}), **case.params}
    answer = {k: v for k, v in (("gold", case.gold), ("tests", case.tests)) if v is not None}
    if verifier == "composite" and merged.get("parts"):
        parts = [dict(p) for p in merged["parts"]]
        parts[0]["params"] = {**parts[0].get("params", {}), **answer}
        merged["parts"] = parts
    else:
        merged.update(answer)
    return VerifierSpec(name=verifier, params=merged)


async def _run(pool_args: dict[str, Any], verifier: str, cases: list[AuditCase], params) -> tuple[list[AuditRow], float]:
    """The rows in input order, and the seconds spent verifying (pool start-up excluded)."""
    from rlvr.verify.pool import VerifierPool

    rows: list[AuditRow | None] = [None] * len(cases)
    warm = (verifier,) if verifier in ("math", "code") else ()

    async def one(i: int, case: AuditCase, pool: VerifierPool, limit: anyio.Semaphore) -> None:
        async with limit:
            try:
                v = await pool.verify(case_spec(verifier, case, params), case.response, case.context())
            except VerifierSpecError as e:
                rows[i] = AuditRow(str(case.id), 0.0, SPEC_ERROR, None, 0.0, detail=str(e))
                return
            rows[i] = AuditRow(
                str(case.id), v.reward, v.outcome, v.extracted, v.latency_s * 1000, v.detail, route_of(v.detail)
            )

    # Plug-ins loaded by run_audit reach the workers too (the pool forwards what this process loaded).
    async with VerifierPool(warm=warm, **pool_args) as pool:
        # Twice the pool size in flight keeps every worker busy without
        # queueing the whole file in memory at once.
        limit = anyio.Semaphore(2 * pool.size)
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i, case in enumerate(cases):
                tg.start_soon(one, i, case, pool, limit)
        elapsed = time.perf_counter() - started
    return [r for r in rows if r is not None], elapsed


def summarise(verifier: str, cases: list[AuditCase], rows: list[AuditRow], elapsed_s: float) -> AuditSummary:
    outcomes: dict[str, int] = {}
    routes: dict[str, int] = {}
    for r in rows:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        if r.route:
            routes[r.route] = routes.get(r.route, 0) + 1
    lat = sorted(r.latency_ms for r in rows if r.outcome != SPEC_ERROR)
    fn, fp, agree, pos, neg = [], [], 0, 0, 0
    for case, row in zip(cases, rows):
        if case.label is None:
            continue
        judged = row.outcome == "ok"
        pos += case.label
        neg += not case.label
        if judged == case.label:
            agree += 1
        elif case.label:
            fn.append(row.id)
        else:
            fp.append(row.id)
    labelled = pos + neg
    return AuditSummary(
        verifier=verifier,
        cases=len(rows),
        elapsed_s=elapsed_s,
        cases_per_s=len(rows) / elapsed_s if elapsed_s > 0 else 0.0,
        outcomes=dict(sorted(outcomes.items())),
        latency_p50_ms=quantile(lat, 0.5),
        latency_p99_ms=quantile(lat, 0.99),
        labelled=labelled,
        positives=pos,
        negatives=neg,
        agreement=agree / labelled if labelled else None,
        false_negative_rate=len(fn) / pos if pos else None,
        false_positive_rate=len(fp) / neg if neg else None,
        false_negatives=fn,
        false_positives=fp,
        spec_errors=[r.id for r in rows if r.outcome == SPEC_ERROR],
        routes=dict(sorted(routes.items())),
        failed=[_why(r) for r in rows if r.outcome in FAILED][:50],
        misjudged=[_why(r) for r in rows if r.id in set(fn) | set(fp)][:50],
    )


# Outcomes that are no judgement at all: training drops them (verify_failed), audit fails on them.
FAILED = ("error", "timeout", "sandbox_error", SPEC_ERROR)


def _why(row: AuditRow) -> dict[str, str]:
    return {"id": row.id, "outcome": row.outcome, "detail": row.detail[:300]}


def run_audit(
    verifier: str,
    input_path: Path | list[AuditCase],
    output_path: Path,
    *,
    pool_size: int = 2,
    timeout_s: float = 30.0,
    params: dict[str, Any] | None = None,
) -> AuditSummary:
    """Verify every case of ``input_path`` (a JSON-lines file, or the cases), write ``output_path``,
    return the summary.

    A ``"package.module:ATTR"`` verifier (or composite part) is the operator's
    own choice on the command line: it is loaded as a plug-in here, and in the
    pool's workers, as ``[verify] plugins`` would load it in a run."""
    cases = input_path if isinstance(input_path, list) else read_cases(Path(input_path))
    load_plugins(import_paths(VerifierSpec(verifier, params or {})))  # VerifierPluginError names a bad one
    get(verifier)  # an unknown verifier fails here, not once per case
    pool_args = {"size": pool_size, "timeout_s": timeout_s}
    rows, elapsed = anyio.run(_run, pool_args, verifier, cases, params)
    encoder = msgspec.json.Encoder()
    with open(output_path, "wb") as f:
        for row in rows:
            f.write(encoder.encode(row) + b"\n")
    return summarise(verifier, cases, rows, elapsed)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _ids(ids: list[str], limit: int = 20) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def format_summary(s: AuditSummary) -> str:
    """A human-readable summary, one fact per line."""
    lines = [
        f"verifier {s.verifier}: {s.cases} cases in {s.elapsed_s:.2f}s ({s.cases_per_s:.1f} cases/s)",
        "outcomes: " + ", ".join(f"{k} {v}" for k, v in s.outcomes.items()),
        f"latency p50 {s.latency_p50_ms:.1f} ms, p99 {s.latency_p99_ms:.1f} ms",
    ]
    if s.routes:
        lines.append("answer found by: " + ", ".join(f"{k} {v}" for k, v in s.routes.items()))
    if s.labelled:
        lines += [
            f"labelled {s.labelled} ({s.positives} correct, {s.negatives} wrong): agreement {_pct(s.agreement)}",
            f"false-negative rate {_pct(s.false_negative_rate)} ({len(s.false_negatives)} of {s.positives})"
            + (f": {_ids(s.false_negatives)}" if s.false_negatives else ""),
            f"false-positive rate {_pct(s.false_positive_rate)} ({len(s.false_positives)} of {s.negatives})"
            + (f": {_ids(s.false_positives)}" if s.false_positives else ""),
        ]
    else:
        lines.append("no labels: agreement, FN and FP rates not computed")
    if s.spec_errors:
        lines.append(f"invalid specs: {_ids(s.spec_errors)}")
    for title, rows in (("not judged (the verifier failed)", s.failed), ("misjudged", s.misjudged)):
        if rows:
            lines.append(f"{title}:")
            lines += [f"  {r['id']}: {r['outcome']}" + (f": {r['detail']}" if r["detail"] else "") for r in rows[:20]]
            if len(rows) > 20:
                lines.append(f"  ... {len(rows) - 20} more in the output file")
    return "\n".join(lines)


__all__ = [
    "AuditCase",
    "AuditInputInvalidError",
    "AuditRow",
    "AuditSummary",
    "FAILED",
    "cases_from_records",
    "format_summary",
    "read_cases",
    "route_of",
    "run_audit",
    "summarise",
]
