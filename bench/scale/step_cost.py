"""What the learner's event loop spends on one R1-sized policy update besides the bus: ``batch_metrics`` (the
step record's statistics) and, inside it, ``foreign_script_share`` (the stage-1 script alarm, which looks at
every character of every completion), on 32 groups of 16 completions of the scale bench's lengths.

    .venv/bin/python -m bench.scale.step_cost [--groups 32] [--repeats 3]

Prints CPU seconds per step and per character (``time.process_time``, no profiler). The scale bench found the
dry learner's event loop stalling for seconds at each step on a busy machine (keep_alive_stalled); this
names the part of the step that grows with the characters. Not here: the bus (run.py).
"""

from __future__ import annotations

import argparse
import time

import anyio

from bench.scale.fleet import R1_GROUP, R1_MAX_TOKENS
from rlvr.learner.config import LearnConfig
from rlvr.learner.watch.metrics import batch_metrics
from rlvr.learner.watch.step_alarms import foreign_script_share
from rlvr.protocol import Completion, Sample, SamplingParams, Scored, Verdict, VerifierSpec
from rlvr.rollout.engines import TrivialEngineConfig, make_engine
from rlvr.rollout.engines.base import TrivialLengthsConfig


def r1_groups(groups: int) -> list[list[Scored]]:
    """``groups`` scored groups of 16 completions of the bench's lengths (the trivial engine's, seeded)."""
    engine = make_engine(TrivialEngineConfig(lengths=TrivialLengthsConfig()))
    sampling = SamplingParams(max_tokens=R1_MAX_TOKENS)

    async def generate():
        return [await engine.generate("12+7=", R1_GROUP, sampling) for _ in range(groups)]

    out = []
    for g, result in enumerate(anyio.run(generate)):
        out.append([Scored(Sample(run="r", task_id=f"t{g}", sample_index=i, group_id=f"t{g}", group_size=R1_GROUP,
                                  prompt_ids=result.prompt_ids, completion=Completion(ids=gen.ids, logprobs=gen.logprobs),
                                  text=gen.text, finish_reason=gen.finish_reason, policy_version=0, policy_version_max=0,
                                  verifier=VerifierSpec("exact", {"gold": "19"}), sampling=sampling, replica="r0"),
                           Verdict(float(i % 2), "ok", "exact"), "v0")
                    for i, gen in enumerate(result.generations)])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale.step_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=32, help="groups per step (R1: 32 questions per policy update)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    groups = r1_groups(args.groups)
    texts = [sc.sample.text for g in groups for sc in g]
    tokens = sum(len(sc.sample.completion.ids) for g in groups for sc in g)
    chars = sum(len(t) for t in texts)
    scripts = LearnConfig().alarms.steps.scripts
    print(f"{len(texts)} samples, {tokens:,} tokens, {chars:,} characters")
    for _ in range(args.repeats):
        t0 = time.process_time()
        batch_metrics(groups, 0, scripts)
        t1 = time.process_time()
        foreign_script_share(texts, scripts)
        t2 = time.process_time()
        print(f"batch_metrics {t1 - t0:.2f} CPU s; foreign_script_share {t2 - t1:.2f} CPU s "
              f"({(t2 - t1) / chars * 1e9:.0f} ns per character)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
