"""New weights out to the rollouts: consolidated shards, the announcement, the collective transport,
and which version each rollout replica serves."""
