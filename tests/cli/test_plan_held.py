"""``rlvr-actor plan`` counts the samples the learner holds in host memory (issue 46): as many as the
tasks in flight and one step's batch can be, each at prompt + max_tokens, at the bytes a token and a
sample that a dry learner holding DeepSeek-R1's step measured (bench/results/held_step_memory.md).

The config is examples/gpu_qwen.toml at R1's step (512 groups of 16, completions up to 32,768
tokens); the shape is Qwen2.5-0.5B's dimensions, built on the meta device.
"""

from __future__ import annotations

import re

import pytest

from rlvr.cli.commands.up import parse_sets
from rlvr.cli.plan.memory import GiB, Held
from rlvr.cli.plan.planner import make_plan
from rlvr.cli.plan.report import format_report
from rlvr.cli.plan.shapes import shape_of_config
from rlvr.cli.run_config import load_config
from tests.conftest import REPO

GPU_QWEN = REPO / "examples/gpu_qwen.toml"
R1_STEP = ("learn.groups_per_step=512", "learn.group_size=16", "learn.sampling.max_tokens=32768",
           "learn.max_staleness=1", "learn.max_inflight_tasks=0")
MEASURED = REPO / "bench/results/held_step_memory.md"


@pytest.fixture(scope="module")
def qwen05b():
    from transformers import Qwen2Config

    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
    return shape_of_config(config, "Qwen2.5-0.5B's shape")


def held(plan):
    return next(p for p in plan.learner.parts if p.name.startswith("held samples"))


def plan_at(shape, *sets: str, gpus: int = 8):
    cfg = load_config(GPU_QWEN, overrides=parse_sets(list(R1_STEP + sets)))
    return make_plan(cfg, shape, gpus=gpus, gpu_bytes=80 * GiB, prompt_tokens=256)


def test_the_plan_holds_the_tasks_in_flight_and_a_batch_each_at_prompt_plus_max_tokens(qwen05b):
    part = held(plan_at(qwen05b))
    # 512 tasks in flight (groups_per_step x max_staleness) and a batch of 512 groups, of 16 samples.
    assert part.bytes == Held((512 + 512) * 16, 256 + 32768).bytes
    assert part.where == "host"  # beside a GPU plan: never charged to the GPU's budget


def test_oversampling_raises_what_is_held_with_the_tasks_in_flight(qwen05b):
    plain, over = held(plan_at(qwen05b)), held(plan_at(qwen05b, "learn.oversample=true"))
    assert over.bytes == Held((4 * 512 + 512) * 16, 256 + 32768).bytes > plain.bytes


def test_on_a_cpu_plan_the_held_samples_are_the_process_s_own_memory(qwen05b):
    plan = plan_at(qwen05b, gpus=0)
    assert held(plan).where == "gpu"  # "gpu" is the process's memory on a plan with no GPU
    assert plan.learner.gpu_bytes >= held(plan).bytes


def test_the_report_names_the_host_memory_and_the_part(qwen05b):
    plan = plan_at(qwen05b)
    text = format_report([], plan)
    assert re.search(r"## learn: .* of host memory", text)
    assert "held samples: up to 16,384 of <= 33,024 tokens" in text and "[host]" in text


def test_the_measured_r1_step_fits_the_plan_s_bytes_for_it():
    # The last row of the measurement: every sample of the step held, RSS above the idle learner.
    row = [line for line in MEASURED.read_text().splitlines() if line.startswith("| ")][-1]
    samples, tokens, _, above_mib = (int(c.replace(",", "")) for c in row.strip("|").split("|")[:4])
    assert samples == 8192
    measured = above_mib * (1 << 20)
    planned = Held(samples, tokens // samples).bytes  # at the step's own mean length
    assert measured <= planned <= 1.3 * measured
