"""What each role's imports cost in memory: a fresh interpreter's RSS and USS after each import, in order.

    OMP_NUM_THREADS=1 python bench/memory_imports.py                       # every role's chain
    OMP_NUM_THREADS=1 python bench/memory_imports.py torch sympy triton    # one chain of your own

RSS counts the libraries' file pages, which the roles share; anonymous memory (the interpreter's
objects, code objects included, and the C libraries' heaps) is each process's own; USS is in between
and moves with whatever else on the machine maps the same files. Each chain runs in a fresh subprocess and imports its modules one after the other, so each line is
what that import added to what came before (a module two chains share is counted in the first chain
that imports it). ``learner (as the engine imports DeepSpeed)`` goes through
``rlvr.learner.train.engine_setup.import_deepspeed``, the way the learner's engine imports it;
``learner (plain import deepspeed)`` is DeepSpeed's own import, with its autotuner's MLflow.

Not covered: what a role allocates once it runs (``bench/memory_by_process.py``, ``bench/memory_learner.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys

# The chains, as each role's start path imports them (cli/roles.py, the engines, the learner's engine).
CHAINS = {
    "verify role": ["rlvr.cli.roles", "rlvr.verify.actor", "rlvr.verify.composite"],
    "verify pool worker": ["rlvr.verify.pool_worker", "rlvr.verify.composite"],
    "up (launcher)": ["rlvr.cli.commands.up"],
    "rollout role (hf engine)": ["rlvr.cli.roles", "rlvr.rollout.actor", "torch", "transformers",
                                 "transformers.models.qwen2.modeling_qwen2", "rlvr.rollout.engines.hf"],
    "learner (plain import deepspeed)": ["rlvr.cli.roles", "rlvr.learner.actor", "torch",
                                         "transformers.models.qwen2.modeling_qwen2", "deepspeed"],
    "learner (as the engine imports DeepSpeed)": ["rlvr.cli.roles", "rlvr.learner.actor", "torch",
                                                  "transformers.models.qwen2.modeling_qwen2", "@import_deepspeed"],
    "what transformers pulls in": ["torch", "sympy", "triton", "torch._dynamo", "transformers",
                                   "transformers.models.qwen2.modeling_qwen2"],
}

_CHILD = r"""
import importlib, json, sys, time
import psutil
me = psutil.Process()
def anon_mib():
    # private by nature, so unlike USS it does not change with what other processes map
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Anonymous:"):
            return round(int(line.split()[1]) / 1024, 1)
def mark(name, t):
    m = me.memory_full_info()
    print(json.dumps({"import": name, "rss": round(m.rss / 2**20, 1), "anon": anon_mib(), "uss": round(m.uss / 2**20, 1),
                      "modules": len(sys.modules), "s": round(time.perf_counter() - t, 2)}), flush=True)
mark("(python, psutil)", time.perf_counter())
for name in sys.argv[1:]:
    t = time.perf_counter()
    if name == "@import_deepspeed":
        from rlvr.learner.train.engine_setup import import_deepspeed
        import_deepspeed()
    else:
        importlib.import_module(name)
    mark(name, t)
heavy = ("torch", "transformers", "deepspeed", "mlflow", "pandas", "pyarrow", "sympy", "triton", "vllm")
print(json.dumps({"loaded": [m for m in heavy if m in sys.modules]}))
"""


def chain(modules: list[str]) -> tuple[list[dict], list[str]]:
    out = subprocess.run([sys.executable, "-c", _CHILD, *modules], capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return rows[:-1], rows[-1]["loaded"]


def main() -> int:
    chains = {"yours": sys.argv[1:]} if len(sys.argv) > 1 else CHAINS
    for name, modules in chains.items():
        rows, loaded = chain(modules)
        print(f"\n{name} (heavy packages loaded at the end: {', '.join(loaded) or 'none'})\n"
              "| import | s | RSS MiB | anonymous MiB | USS MiB | modules |\n| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['import']} | {r['s']} | {r['rss']} | {r['anon']} | {r['uss']} | {r['modules']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
