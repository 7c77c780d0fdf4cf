"""The fault-injection suite: a real skeleton (nats-server, learner, rollout and
verifier processes), faults and poison injected into it, and an invariant
checker that reads the learner's checkpoint ledger and the streams.

Run it from a checkout: ``python -m bench.chaos --quick`` (CI) or
``python -m bench.chaos`` (the full run, which writes bench/results/chaos_full.json).

Modules: ``skeleton`` (servers and role processes), ``observe`` (a read-only
view of the bus), ``invariants`` (the checker), ``faults`` (process, server,
stream and disk faults), ``poison`` (bad messages on every consumed subject),
``cluster`` (a 3-node cluster in network namespaces), ``agent_scenario``,
``agent_faults`` and ``agent`` (agent episodes through a replica's endpoint, the
agent program and its faults), ``run`` (plans, report).
It is not installed with the package: it needs the repository's tests/ for
the poison catalogue and is a bench, not a role.
"""
