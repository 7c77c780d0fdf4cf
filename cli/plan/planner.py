"""A run's memory plan and cost estimate from its config: where each role runs, what it needs,
what does not fit and which one setting would make it fit.

Topology (``--gpus`` per node x ``--nodes``): the vLLM replicas take
``up.rollout_replicas x tensor_parallel_size`` GPUs; when more GPUs are stated the learner's
data-parallel ranks take the rest, one GPU each. With no more GPUs than the rollout's (one GPU:
``up`` on one machine), the learner shares them and gets what the rollout's
``gpu_memory_utilization`` leaves. An HF rollout on ``device = "cpu"`` takes no GPU.
"""

from __future__ import annotations

import msgspec

from rlvr.cli.plan.cost import CostAssumptions, CostEstimate, estimate
from rlvr.cli.plan.memory import (
    GiB, Held, LearnerSettings, RolePlan, RolloutSettings, gib, learner_plan, rollout_plan,
)
from rlvr.cli.plan.shapes import ModelShape


class Topology(msgspec.Struct, frozen=True):
    gpus: int  # in all (per node x nodes)
    gpu_bytes: int | None
    rollout_gpus: int
    learner_ranks: int
    shared: bool  # learner and rollout on the same GPU(s)


class Problem(msgspec.Struct, frozen=True):
    role: str
    key: str
    message: str
    fixes: list[str]


class Plan(msgspec.Struct, frozen=True):
    shape: ModelShape
    topology: Topology
    learner: RolePlan | None
    rollout: RolePlan | None
    rollout_fit_seqs: int | None
    rollout_wanted_seqs: int
    deepspeed_estimate: dict | None
    problems: list[Problem]
    warnings: list[str]
    cost: CostEstimate | None


def learner_settings(cfg) -> LearnerSettings | None:
    e = cfg.learn.engine
    if e is None:
        return None
    return LearnerSettings(
        bf16=e.bf16, zero_stage=e.zero_stage, offload_optimizer=e.offload_optimizer,
        gradient_checkpointing=e.gradient_checkpointing, micro_batch_tokens=e.micro_batch_tokens,
        lora_rank=e.lora.rank if e.lora.enabled else 0, lora_targets=tuple(e.lora.target_modules),
        reference=e.loss.kl_coef > 0,
    )


def rollout_settings(cfg) -> RolloutSettings | None:
    from rlvr.rollout.engines.base import VLLMEngineConfig

    e = cfg.rollout.engine
    if not isinstance(e, VLLMEngineConfig):
        return None
    return RolloutSettings(
        dtype=e.dtype if e.dtype != "auto" else "bfloat16", max_model_len=e.max_model_len, max_num_seqs=e.max_num_seqs,
        gpu_memory_utilization=e.gpu_memory_utilization, tensor_parallel_size=e.tensor_parallel_size,
        enforce_eager=e.enforce_eager, kv_cache_memory_bytes=e.kv_cache_memory_bytes,
        wanted_seqs=cfg.rollout.max_inflight_tasks * cfg.learn.group_size,
    )


def topology(cfg, gpus: int, nodes: int, gpu_bytes: int | None) -> Topology:
    total = max(0, gpus) * max(1, nodes)
    r = rollout_settings(cfg)
    if r is not None:
        rollout_gpus = cfg.up.rollout_replicas * r.tensor_parallel_size
    else:
        device = getattr(cfg.rollout.engine, "device", "cpu")
        rollout_gpus = cfg.up.rollout_replicas if device.startswith("cuda") else 0
    if total > rollout_gpus:
        return Topology(total, gpu_bytes, rollout_gpus, total - rollout_gpus, False)
    return Topology(total, gpu_bytes, rollout_gpus, max(1, total), total > 0 and rollout_gpus > 0)


def learner_budget(cfg, top: Topology) -> int | None:
    if top.gpu_bytes is None or top.gpus == 0:
        return None
    r = rollout_settings(cfg)
    if top.shared and r is not None:
        return int(top.gpu_bytes * (1 - r.gpu_memory_utilization))
    return top.gpu_bytes


def make_plan(cfg, shape: ModelShape, *, gpus: int = 1, nodes: int = 1, gpu_bytes: int | None = None,
              prompt_tokens: float | None = None, assumptions: CostAssumptions | None = None) -> Plan:
    assumptions = assumptions or CostAssumptions()
    top = topology(cfg, gpus, nodes, gpu_bytes)
    problems: list[Problem] = []
    warnings: list[str] = []
    learner = ds = None
    s = learner_settings(cfg)
    on_gpu = top.gpus > 0
    if s is not None:
        budget = learner_budget(cfg, top)
        learner = learner_plan(shape, s, ranks=top.learner_ranks, budget=budget, on_gpu=on_gpu,
                               held=held_samples(cfg, prompt_tokens))
        ds = deepspeed_estimate(shape, s, top.learner_ranks)
        if learner.shortfall:
            where = (f"{gib(budget)} per GPU left by rollout.engine.gpu_memory_utilization on the shared GPU"
                     if top.shared else f"{gib(budget)} per GPU")
            problems.append(Problem(
                "learn", "learn.engine",
                f"the learner needs {gib(learner.gpu_bytes)} per GPU, {gib(learner.shortfall)} more than {where}",
                learner_fixes(cfg, shape, s, top, budget)))
    rollout, fit = None, None
    r = rollout_settings(cfg)
    if r is not None and on_gpu and top.rollout_gpus == 0:
        # up.rollout_replicas = 0: the replicas run on other machines, whose GPUs these are not.
        warnings.append("rollout: up.rollout_replicas = 0, so no rollout runs on these GPUs and vLLM's fit is not "
                        "checked here; run `rlvr-actor plan` with the rollout machines' --gpus and --gpu-memory")
        r = None
    if r is not None:
        rollout, fit = rollout_plan(shape, r, gpu_bytes if on_gpu else None)
        if fit is not None and fit < 1:
            problems.append(Problem(
                "rollout", "rollout.engine.max_model_len",
                f"vLLM's KV cache ({gib(rollout.parts[-1].bytes)}) holds no whole sequence of max_model_len = "
                f"{r.max_model_len} tokens: vLLM refuses to start", rollout_fixes(shape, r, gpu_bytes)))
        elif fit is not None and fit < min(r.wanted_seqs, r.max_num_seqs):
            warnings.append(
                f"rollout: {fit} sequences of {r.max_model_len} tokens fit in the KV cache at once, the run asks "
                f"for up to {min(r.wanted_seqs, r.max_num_seqs)} (rollout.max_inflight_tasks x learn.group_size, "
                "capped by max_num_seqs): vLLM queues or preempts the rest; generation is slower, nothing fails")
    cost = None
    if on_gpu and cfg.learn.engine is not None:
        ptoks = prompt_tokens if prompt_tokens is not None else float(getattr(cfg.rollout.engine, "max_prompt_tokens", 0))
        cost = estimate(
            shape, group_size=cfg.learn.group_size, groups_per_step=cfg.learn.groups_per_step, steps=cfg.learn.steps,
            prompt_tokens=ptoks, completion_tokens=cfg.learn.sampling.max_tokens,
            ppo_epochs=cfg.learn.engine.ppo_epochs, overlapped=cfg.learn.max_staleness >= 1,
            learner_gpus=top.learner_ranks, rollout_gpus=top.rollout_gpus, gpus=top.gpus, a=assumptions)
    wanted = r.wanted_seqs if r is not None else 0
    return Plan(shape, top, learner, rollout, fit, wanted, ds, problems, warnings, cost)


def held_samples(cfg, prompt_tokens: float | None) -> Held:
    """The most samples the learner holds at once (cli/plan/memory.py says why): the tasks in flight
    (raised up to MAX_OVERSAMPLE times by ``learn.oversample``) and one step's batch, each a group."""
    from rlvr.learner.data.pacing import MAX_OVERSAMPLE

    learn = cfg.learn
    inflight = learn.inflight_limit * (MAX_OVERSAMPLE if learn.oversample else 1)
    ptoks = prompt_tokens if prompt_tokens is not None else float(getattr(cfg.rollout.engine, "max_prompt_tokens", 0))
    return Held(int((inflight + learn.groups_per_step) * learn.group_size), int(ptoks) + learn.sampling.max_tokens)


def deepspeed_estimate(shape: ModelShape, s: LearnerSettings, ranks: int) -> dict | None:
    """DeepSpeed's own estimate of the model states per GPU (ZeRO-2 and -3, bf16 mixed precision,
    full parameters: its functions assume that), with its buffer factor 1.0 to compare like with like."""
    if not s.bf16 or s.lora_rank or s.zero_stage not in (2, 3):
        return None
    if s.zero_stage == 2:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as est2

        _, gpu = est2(shape.params, num_gpus_per_node=ranks, cpu_offload=s.offload_optimizer,
                      additional_buffer_factor=1.0)
    else:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as est3

        _, gpu, _ = est3(shape.params, shape.largest_layer_params, num_gpus_per_node=ranks,
                         cpu_offload=s.offload_optimizer, cpu_offload_params=False, additional_buffer_factor=1.0)
    return {"zero_stage": s.zero_stage, "gpu_bytes": int(gpu), "function": f"estimate_zero{s.zero_stage}_model_states_mem_needs"}


def learner_fixes(cfg, shape: ModelShape, s: LearnerSettings, top: Topology, budget: int) -> list[str]:
    """Single settings that would make the learner fit, each with what it would then need."""
    fixes: list[str] = []

    def need(**change) -> int:
        return learner_plan(shape, msgspec.structs.replace(s, **change), ranks=top.learner_ranks,
                            budget=budget).gpu_bytes

    def offer(text: str, **change) -> None:
        n = need(**change)
        if n <= budget:
            fixes.append(f"{text} (needs {gib(n)})")

    if not s.gradient_checkpointing:
        offer("learn.engine.gradient_checkpointing = true", gradient_checkpointing=True)
    t = s.micro_batch_tokens
    while t > 256 and need(micro_batch_tokens=t) > budget:
        t //= 2
    if t < s.micro_batch_tokens and need(micro_batch_tokens=t) <= budget:
        fixes.append(f"learn.engine.micro_batch_tokens = {t} (needs {gib(need(micro_batch_tokens=t))}; "
                     "more micro-batches per step, same batch)")
    if top.learner_ranks > 1:  # a stage shards only over several ranks; each higher one that fits is offered
        for stage in range(s.zero_stage + 1, 4):
            offer(f"learn.engine.zero_stage = {stage}", zero_stage=stage)
    if not s.offload_optimizer:
        stage = max(1, s.zero_stage)
        offer(("" if s.zero_stage else f"learn.engine.zero_stage = {stage} with ")
              + "learn.engine.offload_optimizer = true (optimizer states in CPU memory; slower steps)",
              offload_optimizer=True, zero_stage=stage)
    if not s.lora_rank:
        from rlvr.learner.engine_config import LORA_DEFAULT_TARGETS

        offer("[learn.engine.lora] enabled = true, rank = 16 (adapters only)", lora_rank=16,
              lora_targets=LORA_DEFAULT_TARGETS)
    r = rollout_settings(cfg)
    if top.shared and r is not None and top.gpu_bytes:
        n = learner_plan(shape, s, ranks=top.learner_ranks, budget=budget).gpu_bytes
        util = 1 - n / top.gpu_bytes
        if util > 0.05:
            fixes.append(f"rollout.engine.gpu_memory_utilization = {int(util * 100) / 100:.2f} (leaves the learner "
                         f"{gib(n)}; check the rollout's KV cache then)")
        fixes.append("a GPU of its own for the learner (--gpus 2: roles started separately, "
                     "CUDA_VISIBLE_DEVICES per process)")
    if s.reference:
        fixes.append("learn.engine.loss.kl_coef = 0 (no reference model)")
    return fixes or ["a GPU with more memory, or more GPUs (--gpus) with zero_stage >= 2"]


def rollout_fixes(shape: ModelShape, r: RolloutSettings, gpu_bytes: int | None) -> list[str]:
    from rlvr.cli.plan.memory import kv_bytes_per_token

    fixes = []
    plan, _ = rollout_plan(shape, r, gpu_bytes)
    kv = plan.parts[-1].bytes
    longest = kv // max(1, kv_bytes_per_token(shape, r.dtype, r.tensor_parallel_size))
    if longest >= 64:
        fixes.append(f"rollout.engine.max_model_len = {longest} or less")
    if gpu_bytes and r.gpu_memory_utilization < 0.95 and r.kv_cache_memory_bytes is None:
        per_seq = kv_bytes_per_token(shape, r.dtype, r.tensor_parallel_size) * r.max_model_len
        util = (sum(p.bytes for p in plan.parts[:-1]) + per_seq * 2) / gpu_bytes
        if util <= 0.95:
            fixes.append(f"rollout.engine.gpu_memory_utilization = {min(0.95, util + 0.01):.2f}")
    fixes.append(f"rollout.engine.tensor_parallel_size = {r.tensor_parallel_size * 2}")
    return fixes


def parse_bytes(text: str) -> int:
    """'80GiB', '80GB', '141 GiB', '24g', a plain number of bytes."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b?)\s*", text.lower())
    if not m:
        raise ValueError(f"{text!r} is not a size such as 80GiB")
    value, unit, suffix = float(m.group(1)), m.group(2), m.group(3)
    if not unit:
        return int(value)
    power = "kmgt".index(unit) + 1
    return int(value * (1024 ** power if suffix != "b" else 1000 ** power))


__all__ = ["GiB", "Plan", "Problem", "Topology", "learner_settings", "make_plan", "parse_bytes", "rollout_settings",
           "topology"]
