"""The plan as text: the checks, the memory table per role, what does not fit and its fixes, the estimate."""

from __future__ import annotations

from rlvr.cli.plan.memory import MOMENTS, at_moments, gib


def format_report(findings, plan) -> str:
    lines = ["# checks"]
    for f in findings:
        lines.append(f"{'ok  ' if f.ok else 'FAIL'} {f.key}: {f.message}")
    if plan is None:
        lines.append("# memory plan: no model shape to plan from")
        return "\n".join(lines)
    s, t = plan.shape, plan.topology
    lines.append(f"# model ({s.source}): {s.architecture}, {s.params / 1e6:,.1f}M parameters, hidden {s.hidden}, "
                 f"{s.layers} layers, {s.heads} heads ({s.kv_heads} key/value), MLP {s.intermediate}, "
                 f"vocabulary {s.vocab}, {'tied' if s.tied else 'untied'} head")
    gpu = gib(t.gpu_bytes) if t.gpu_bytes else "memory not stated (--gpu-memory)"
    if t.gpus:
        lines.append(f"# GPUs: {t.gpus} x {gpu}; rollout {t.rollout_gpus}, learner {t.learner_ranks} rank(s)"
                     + (", sharing the rollout's GPU" if t.shared else ""))
    else:
        lines.append("# no GPU (--gpus 0): bytes each role needs in host memory")
    for role in (plan.learner, plan.rollout):
        if role is None:
            continue
        budget = f" of {gib(role.budget)}" if role.budget is not None else ""
        lines.append(f"## {role.role}: {gib(role.gpu_bytes)} per {'GPU' if t.gpus else 'process'}{budget}"
                     + (f", {gib(role.cpu_bytes)} offloaded to CPU memory" if role.cpu_bytes else "")
                     + (f", {gib(role.host_bytes)} of host memory" if role.host_bytes else ""))
        for p in role.parts:
            lines.append(f"   {gib(p.bytes):>12}  {p.name}" + {"cpu": "  [CPU]", "host": "  [host]"}.get(p.where, "")
                         + ("" if set(p.alive) == set(MOMENTS) else f"  (at: {', '.join(p.alive)})"))
        if any(set(p.alive) != set(MOMENTS) for p in role.parts):
            at = at_moments(role.parts, "gpu")  # the process's own memory, GPU or not ("cpu": what offload moves)
            lines.append("   peak: the largest of the step's three moments: the forward's end "
                         f"{gib(at['forward'])}, the backward's end {gib(at['backward'])}, the optimizer step "
                         f"{gib(at['step'])}")
        for n in role.notes:
            lines.append(f"   note: {n}")
    if plan.deepspeed_estimate:
        d = plan.deepspeed_estimate
        # DeepSpeed's estimate is of weights, gradients and optimizer states: the same terms of this plan.
        ours = sum(p.bytes for p in plan.learner.parts if p.where == "gpu" and p.name.startswith(
            ("weights", "gradients", "master", "AdamW moments")))
        lines.append(f"   DeepSpeed's {d['function']}: {gib(d['gpu_bytes'])} of model states per GPU "
                     f"(this plan: {gib(ours)})")
    if plan.rollout_fit_seqs is not None:
        lines.append(f"   rollout: {plan.rollout_fit_seqs} sequences of max_model_len fit in the KV cache at once "
                     f"(the run asks for up to {plan.rollout_wanted_seqs})")
    for w in plan.warnings:
        lines.append(f"warn {w}")
    for p in plan.problems:
        lines.append(f"FAIL {p.role} does not fit ({p.key}): {p.message}")
        for fix in p.fixes:
            lines.append(f"     fix: {fix}")
    c = plan.cost
    if c is not None:
        a = c.assumptions
        lines.append("# estimate (not a measurement)")
        lines.append(f"   assumed: learner MFU {a.mfu:.0%} of {a.peak_tflops:g} TFLOP/s per GPU, rollout decode "
                     f"{a.decode_tokens_per_s:g} tokens/s per GPU, {a.keep:.0%} of groups kept, prompts of "
                     f"{c.prompt_tokens:.0f} tokens, completions at max_tokens = {c.completion_tokens}")
        lines.append(f"   per step: {c.samples_per_step} samples, learner {c.learner_tflop_per_step:,.1f} TFLOP "
                     f"= {c.learner_s:.1f} s, rollout {c.rollout_s:.1f} s, step {c.step_s:.1f} s "
                     f"({'overlapped: max_staleness >= 1' if c.overlapped else 'in turn: max_staleness = 0'})")
        if not c.rollout_gpus:
            lines.append("   rollout: no GPU in this plan (up.rollout_replicas = 0 or an engine on CPU): its time at "
                         "one GPU's decode rate, no GPU charged for it")
        money = f", {c.cost:,.2f} at the stated price" if c.cost is not None else ""
        lines.append(f"   run: {c.run_hours:.2f} h on {c.gpus} GPU(s), each counted once: {c.gpu_hours:.1f} GPU-hours{money}")
    return "\n".join(lines)
