"""The built-in example of ``rlvr-actor up``: the tiny arithmetic model, its
character tokenizer, the supervised warm-up (cold start) and the greedy check
that stops it. Not the training core: nothing under ``rlvr.learner`` outside
this folder imports it."""
