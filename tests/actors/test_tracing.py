"""Tracing costs little per message and keeps one trace per trajectory:
head sampling decided at the root and followed by every hop, no SDK at all
when nothing is exported, one write per exported batch."""

import json

import pytest

from opentelemetry import trace

from rlvr.actors import tracing
from rlvr.actors.tracing import (
    extract_context,
    hop_span,
    inject_headers,
    make_provider,
    passing_on,
    remote_span_context,
    trace_id_of,
)

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


@pytest.fixture(autouse=True)
def _recording(monkeypatch):
    """As in a process that records spans (setup_tracing installed a provider)."""
    monkeypatch.setattr(tracing, "_provider", object())
    monkeypatch.setattr(tracing, "_tracers", {})


def _provider(tmp_path, exporter="file", ratio=1.0):
    return make_provider(service="verify", replica="r0", run="t", exporter=exporter, trace_dir=tmp_path,
                         sample_ratio=ratio)


def _sampled(traceparent):
    return bool(int(traceparent.rsplit("-", 1)[1], 16) & 1)


def _hop(tracer, traceparent):
    """What a consumer and its handler do: the consumer passes the message's
    traceparent on and extracts its context (``Delivery``), the handler starts
    the hop's span from it (``hop_span``) and publishes downstream (inject)."""
    tracing._tracers["rlvr"] = tracer  # the process's tracer, as tracer() hands it out
    with passing_on(traceparent):
        ctx = extract_context({"traceparent": traceparent} if traceparent else {})
        with hop_span("verify.score", ctx, {"rlvr.sample_id": "t/0"}) as span:
            return span.is_recording(), inject_headers().get("traceparent")


def test_head_sampling_is_decided_at_the_root_and_followed_by_every_hop(tmp_path):
    none_sampled = _provider(tmp_path, ratio=0.0).get_tracer("t")
    # A root (the feeder) at ratio 0 records nothing and tells the next hops so.
    recording, downstream = _hop(none_sampled, None)
    assert not recording and not _sampled(downstream)
    # A hop follows its parent's decision, whatever its own ratio.
    assert _hop(none_sampled, SAMPLED)[0] is True
    # An unsampled trajectory costs no span and no parsing; its traceparent goes on unchanged.
    assert extract_context({"traceparent": UNSAMPLED}) is None
    assert _hop(_provider(tmp_path, ratio=1.0).get_tracer("t"), UNSAMPLED) == (False, UNSAMPLED)
    recording, downstream = _hop(_provider(tmp_path, ratio=1.0).get_tracer("t"), SAMPLED)
    assert recording and downstream.split("-")[1] == SAMPLED.split("-")[1]  # same trace


def test_no_exporter_means_no_sdk_and_the_trace_passes_through_unchanged(tmp_path, monkeypatch):
    """A process that records nothing does not even parse the header: it hands
    the producer's traceparent on as is, so the next hop joins the same trace."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert _provider(tmp_path, exporter="none") is None
    monkeypatch.setattr(tracing, "_provider", None)
    assert extract_context({"traceparent": SAMPLED}) is None
    with passing_on(SAMPLED):
        assert inject_headers({"Nats-Msg-Id": "x"}) == {"Nats-Msg-Id": "x", "traceparent": SAMPLED}
    assert inject_headers() == {}
    assert trace_id_of(SAMPLED) == SAMPLED.split("-")[1] and trace_id_of("junk") is None


def test_file_exporter_writes_one_json_line_per_span(tmp_path):
    provider = _provider(tmp_path)
    tracer = provider.get_tracer("t")
    for _ in range(5):
        _hop(tracer, SAMPLED)
    provider.shutdown()
    lines = (tmp_path / "verify-r0.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 5
    assert {r["trace_id"] for r in records} == {SAMPLED.split("-")[1]}
    assert {r["parent_span_id"] for r in records} == {SAMPLED.split("-")[2]}


def test_run_spans_are_always_recorded_and_link_only_sampled_trajectories(tmp_path):
    tracer = _provider(tmp_path, ratio=0.0).get_tracer("t")
    with tracer.start_as_current_span("feeder.task") as root:
        assert not root.is_recording()  # a trajectory's root at ratio 0
    with tracer.start_as_current_span("learn.step") as step:
        assert step.is_recording()  # the run's own timeline, whatever the ratio
    with tracer.start_as_current_span("rollout.load_weights") as load:
        assert load.is_recording()


def test_the_default_ratio_samples_about_that_share_of_trajectories(tmp_path):
    from rlvr.actors.config import ObservabilityConfig

    ratio = ObservabilityConfig().trace_sample_ratio
    tracer = _provider(tmp_path, ratio=ratio).get_tracer("t")
    sampled = 0
    for _ in range(20_000):
        with tracer.start_as_current_span("feeder.task") as root:
            sampled += root.is_recording()
    assert 0 < ratio < 0.1 and abs(sampled / 20_000 - ratio) < 0.01


def test_the_file_exporter_rotates_at_its_cap_and_keeps_the_newest_spans(tmp_path):
    provider = make_provider(service="verify", replica="r0", run="t", exporter="file", trace_dir=tmp_path,
                             sample_ratio=1.0, file_max_bytes=4_000)
    tracer = provider.get_tracer("t")
    for i in range(200):
        with tracer.start_as_current_span("learn.step", attributes={"i": i}):
            pass
        if i % 10 == 9:
            provider.force_flush()
    provider.shutdown()
    current, previous = tmp_path / "verify-r0.jsonl", tmp_path / "verify-r0.1.jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == [previous.name, current.name]
    assert current.stat().st_size <= 4_000 and previous.stat().st_size <= 4_000
    kept = [json.loads(line)["attributes"]["i"] for p in (previous, current) for line in p.read_text().splitlines()]
    assert kept == list(range(kept[0], 200))  # the newest, in order, none lost between the two files


def test_remote_span_context_of_a_message():
    assert remote_span_context(extract_context({})) is None
    ctx = remote_span_context(extract_context({"traceparent": SAMPLED}))
    assert ctx is not None and f"{ctx.trace_id:032x}" == SAMPLED.split("-")[1]
    assert trace.get_current_span().get_span_context().is_valid is False  # nothing was attached


W3C = r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}"
HOSTILE = [
    "",                                                          # empty
    "garbage",                                                   # not W3C at all
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz",   # 55 chars, flags not hex
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",    # one short
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-011",  # one long
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",   # all-zero trace id (invalid)
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",   # all-zero span id (invalid)
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   # forbidden version
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",   # upper case
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nNats-Msg-Id: x",  # header smuggling
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-\u00e9\u00e9",  # non-ASCII flags
    "00-" + "a" * 1_000_000,                                     # a megabyte
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02",   # only the random bit: unsampled
]


@pytest.mark.parametrize("traceparent", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_traceparent_never_breaks_a_hop_nor_travels_on_malformed(tmp_path, traceparent):
    """A message's headers are untrusted. Whatever its ``traceparent``, the hop
    runs: it records under a fresh root (a recording process rejects what does
    not parse), or, for a well-formed header whose sampled flag is off, records
    nothing and passes it on unchanged. Nothing malformed goes downstream."""
    import re

    recording, downstream = _hop(_provider(tmp_path, ratio=1.0).get_tracer("t"), traceparent)
    if recording:
        assert re.fullmatch(W3C, downstream) and _sampled(downstream)
    else:  # the fast path: a well-formed, unsampled header, handed on as it came
        assert downstream == traceparent and re.fullmatch(W3C, traceparent) and not _sampled(traceparent)


@pytest.mark.parametrize("traceparent", HOSTILE, ids=range(len(HOSTILE)))
def test_a_process_that_records_nothing_passes_on_only_well_formed_traceparents(monkeypatch, traceparent):
    """Without a tracer provider the header is not parsed, only checked for its
    shape: a malformed one (a megabyte, smuggled header lines) is dropped rather
    than copied onto every message the hop publishes."""
    import re

    monkeypatch.setattr(tracing, "_provider", None)
    with passing_on(traceparent):
        downstream = inject_headers().get("traceparent")
    assert downstream == (traceparent if re.fullmatch(W3C, traceparent) else None)
