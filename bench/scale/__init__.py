"""R1's step, sized by measurement (issue 46): a 3-node R3 JetStream cluster on this machine, the real
roles on it (the dry learner, ``exact`` verifiers, trivial-engine rollouts with a reasoning model's
completion lengths), and a ladder of rollout replicas until the bus stops keeping up.

    .venv/bin/python -m bench.scale [--quick]

Files: ``cluster`` (the three nodes from ops/nats/cluster), ``fleet`` (the run's config and its role
processes), ``procs`` (CPU and disk writes from /proc), ``meter`` (the readings and what a window of
them says), ``report`` (bench/results/scale.md and its picture), ``run`` (the ladder and the command),
``step_cost`` (what one R1-sized step costs the learner's event loop besides the bus).
docs/scale.md sizes a 1,000-GPU run from what this writes.
"""
