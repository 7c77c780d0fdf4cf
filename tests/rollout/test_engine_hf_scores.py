"""hf engine behaviour log-probs, read step by step (rollout/engines/hf_logprobs.py).

(a) On the same seeded generation, the engine's tokens and log-probs equal
those of the path it replaced: ``generate`` with the warpers in its config and
``output_scores``, then ``log_softmax(stack(scores))`` gathered at the sampled
ids (max abs difference <= 1e-6), at temperature 1 (with a stop string, so
rows finish early and are padded), at 0.7 with top-k and top-p, and greedy.

(b) Memory does not grow with the generated length: a TorchDispatchMode
watches every tensor an aten op returns during ``generate``, and tracks the
storages of the batch x vocabulary ones ([B, ..., V]) while they are alive.
Their peak live bytes are no higher for 64 new tokens than for 8 and stay under
16 one-step rows (16 x B x V x 4 bytes; the step's logits, processed scores,
probabilities and the held row take a handful). The same watcher on the old
path sees a [B, 64, V] tensor and more than 64 rows alive at once, so it
does catch what it is meant to catch. Allocation sizes, not timings.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from rlvr.protocol import SamplingParams

TOL = 1e-6
PROMPTS = ["Solve: 12+7=", "3*4=", "What is 8+5? The answer is", "def add(a, b):", "x", "45-13="]
CASES = {
    "t1_stop": SamplingParams(temperature=1.0, max_tokens=48, stop=("e",)),
    "t07_topk_topp": SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_tokens=24),
    "greedy": SamplingParams(temperature=0.0, max_tokens=24),
}


@pytest.fixture(scope="module")
def engine(tiny_model, loop) -> Iterator[Any]:
    """An engine of its own: the session one may carry other tests' weights."""
    from rlvr.rollout.engines import HFEngineConfig, make_engine

    eng = make_engine(HFEngineConfig(model=str(tiny_model), max_batch=8))
    loop.run(eng.start())
    yield eng
    loop.run(eng.close())


def _rows(engine) -> list[list[int]]:
    return [engine._tok(p)["input_ids"] for p in PROMPTS]


def _padded(engine, rows):
    import torch

    pad = engine._model.generation_config.pad_token_id
    width = max(len(r) for r in rows)
    x = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return x, mask, width


def _output_scores_path(engine, rows, sampling: SamplingParams):
    """The replaced path: warpers from the generation config, ``output_scores``,
    one [B, T, V] stack. Returns the generated ids and their log-probs [B, T]."""
    import torch
    from transformers import GenerationConfig

    greedy = sampling.temperature == 0.0
    cfg = GenerationConfig(
        do_sample=not greedy,
        temperature=None if greedy else sampling.temperature,
        top_p=None if greedy or sampling.top_p >= 1.0 else sampling.top_p,
        top_k=0 if greedy or sampling.top_k <= 0 else sampling.top_k,
        max_new_tokens=sampling.max_tokens,
        eos_token_id=engine._eos,
        pad_token_id=engine._model.generation_config.pad_token_id,
        stop_strings=list(sampling.stop) or None,
        output_scores=True,
        return_dict_in_generate=True,
    )
    x, mask, width = _padded(engine, rows)
    with torch.inference_mode():
        res = engine._model.generate(
            input_ids=x, attention_mask=mask, generation_config=cfg,
            tokenizer=engine._tok if sampling.stop else None,
        )
        new = res.sequences[:, width:]
        lp = torch.log_softmax(torch.stack(res.scores, dim=1), dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    return new, lp


@pytest.mark.parametrize("case", list(CASES))
def test_logprobs_equal_the_output_scores_path(engine, case):
    import torch

    sampling, rows = CASES[case], _rows(engine)
    torch.manual_seed(11)
    gens = engine._generate_chunk(rows, sampling)
    torch.manual_seed(11)
    new, lp = _output_scores_path(engine, rows, sampling)
    worst = 0.0
    for g, ids, ref in zip(gens, new.tolist(), lp.tolist(), strict=True):
        assert g.ids == ids[: len(g.ids)], "not the same generation"
        worst = max([worst] + [abs(a - b) for a, b in zip(g.logprobs, ref, strict=False)])
    print(f"{case}: max |logprob diff| {worst:.2e}, lengths {[len(g.ids) for g in gens]}")
    assert worst <= TOL
    if case == "t1_stop":
        assert len({len(g.ids) for g in gens}) > 1, "no row finished early: padding not exercised"
    if case == "greedy":
        assert all(lp <= 0.0 for g in gens for lp in g.logprobs)
        assert any(lp < -1e-3 for g in gens for lp in g.logprobs), "greedy log-probs must be unscaled, not 0"


class _VocabTensors:
    """Peak live bytes of distinct storages behind [rows, ..., vocab] tensors
    returned by aten ops, and the largest such tensor's shape."""

    def __init__(self, rows: int, vocab: int) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        watcher = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                watcher._see(out)
                return out

        self.mode = Mode()
        self.rows, self.vocab = rows, vocab
        self.live: dict[int, tuple[int, list[weakref.ref]]] = {}  # storage pointer -> (bytes, tensors on it)
        self.peak_bytes = 0
        self.largest: tuple[int, ...] = ()

    def _see(self, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        # Drop storages none of whose tensors is alive first: a freed pointer may come back.
        self.live = {p: e for p, e in self.live.items() if any(r() is not None for r in e[1])}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[0] == self.rows and t.shape[-1] == self.vocab:
                storage = t.untyped_storage()
                self.live.setdefault(storage.data_ptr(), (storage.nbytes(), []))[1].append(weakref.ref(t))
                if t.numel() > (torch.Size(self.largest).numel() if self.largest else 0):
                    self.largest = tuple(t.shape)
        self.peak_bytes = max(self.peak_bytes, sum(b for b, _ in self.live.values()))


def _watch(engine, run) -> _VocabTensors:
    w = _VocabTensors(len(PROMPTS), engine._model.config.vocab_size)
    with w.mode:
        run()
    return w


@pytest.mark.parametrize("case", ["t07_topk_topp", "greedy"])
def test_peak_memory_does_not_grow_with_the_generated_length(engine, case):
    import torch

    rows, vocab = _rows(engine), engine._model.config.vocab_size
    row_bytes = len(rows) * vocab * 4  # one step's [B, V] float32 scores
    peaks = {}
    for t in (8, 64):
        sampling = SamplingParams(
            temperature=CASES[case].temperature, top_k=CASES[case].top_k, top_p=CASES[case].top_p, max_tokens=t
        )
        torch.manual_seed(5)
        w = _watch(engine, lambda s=sampling: engine._generate_chunk(rows, s))
        assert w.largest and w.largest[-1] == vocab, "the watcher saw no scores at all"
        assert torch.Size(w.largest).numel() < len(rows) * 8 * vocab, f"a {w.largest} tensor"
        peaks[t] = w.peak_bytes
        if t == 64:
            torch.manual_seed(5)
            old = _watch(engine, lambda s=sampling: _output_scores_path(engine, rows, s))
            print(f"{case}: peak live [B, V] bytes, new 8/64 tokens {peaks[8]}/{peaks[64]}, old 64 {old.peak_bytes} "
                  f"(one row {row_bytes}); largest new {w.largest}, old {old.largest}")
            assert old.largest == (len(rows), 64, vocab)
            assert old.peak_bytes > 64 * row_bytes
    assert peaks[64] <= peaks[8]
    assert peaks[64] < 16 * row_bytes
