"""The pieces of bench/vs_trl.py: rlvr-actor against TRL's GRPOTrainer on the same work.

- ``task``: the task both train on, read from an rlvr-actor config (prompts, held-out split, reward);
- ``evaluate``: the one held-out pass@1 function, applied to saved weights of either framework;
- ``settings``: the algorithmic settings both share, and the ones that differ and why;
- ``run_rlvr`` / ``run_trl``: one run of each, leaving timed weight snapshots behind;
- ``limit``: the learner step alone, a tight forward+backward loop of the same tokens;
- ``watch``: the process tree's peak RSS and CPU, and the load average;
- ``profile``: where an rlvr-actor run's wall time went, from its step records and file traces;
- ``report``: the per-framework figures, their ratios, ``vs_trl.jsonl`` and ``vs_trl.md``.

TRL is imported only in ``run_trl`` (a child process of the benchmark), never by the project.
"""
