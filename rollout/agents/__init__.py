"""Agents users already have, trained unmodified: the endpoint they call and the record of every token.

- ``endpoint``: ``AgentEndpoint``, the OpenAI- and Anthropic-compatible HTTP endpoint one rollout
  replica serves, with per-episode keys and the reward report;
- ``session``: ``AgentSession`` (one episode: limits, segments, the outcome) and ``AgentLimits``;
- ``openai_wire``, ``anthropic_wire``: each API's request types, responses, stream events and errors;
- ``replies``: the model's output as visible text and tool calls.

Import ``rlvr.rollout.agents.endpoint`` for the endpoint (it imports the ASGI stack); this package's
top level imports nothing heavy.
"""
