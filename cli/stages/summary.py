"""The stage table ``up`` prints at the end of a run with stages (and ``summary.json["stages"]`` holds)."""

from __future__ import annotations


def _pct(p: float | None) -> str:
    return "     n/a" if p is None else f"{100 * p:7.1f}%"


def stage_lines(stages: list[dict]) -> list[str]:
    """One line per stage: its steps, held-out pass@1 before and after, and its wall time."""
    if not stages:
        return []
    lines = [f"{'stage':<22} {'kind':<14} {'status':<8} {'steps':>6} {'pass@1 before':>14} {'after':>8} {'seconds':>8}"]
    for s in stages:
        lines.append(f"{s['name']:<22} {s['kind']:<14} {s['status']:<8} {s['steps']:>6} "
                     f"{_pct(s['pass_at_1_before']):>14} {_pct(s['pass_at_1_after']):>8} {s['seconds']:>8.0f}")
        kept = s.get("detail", {}).get("kept")
        if kept:
            lines.append(f"{'':<22} kept {kept['kept']} of {kept['sampled']}: " + ", ".join(
                f"{k} {v}" for k, v in kept.items() if k not in ("sampled", "kept", "prompts_kept") and v))
    return lines
