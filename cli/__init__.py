"""The entry layer: the ``rlvr-actor`` command, one module per operator command, the terminal UI.

Layers, checked by import-linter (``[tool.importlinter]`` in pyproject.toml):
``rlvr.cli`` may import every role; the roles (``rollout``, ``verify``,
``learner``) import only the runtime (``rlvr.actors``) and the wire types
(``rlvr.protocol``), never each other and never this package.

- ``main``: argument parsing and dispatch (stdlib only at import, so ``--help`` is instant);
- ``args``: the parsed arguments as typed Structs, shared by several commands;
- ``roles``: run one role in this process (``--role``);
- ``run_config``: the whole-run ``Config`` that names every role's section;
- ``natsserver``: the embedded ``nats-server`` that ``up`` (and the tests) start;
- ``commands/``: ``up``, ``init``, ``status``, ``eval``, ``audit``, ``report``, ``config-doc``;
- ``ui/``: what ``up`` draws in the terminal (plain lines or the live panel).
"""
