"""Map the top-level folders onto the ``rlvr`` namespace.

``protocol/`` installs as ``rlvr.protocol``, ``verify/math`` as
``rlvr.verify.math`` and so on, for ``pip install .`` and ``pip install -e .``
alike. ``rlvr`` itself is an implicit namespace package: nothing named
``protocol`` or ``verify`` ever lands bare in site-packages. Every folder with
an ``__init__.py`` below a root ships; tests/test_packaging.py checks it.
"""

import os

from setuptools import setup

ROOTS = ("protocol", "actors", "sandbox", "rollout", "verify", "learner", "cli")
HERE = os.path.dirname(os.path.abspath(__file__))


def _packages() -> list[str]:
    found = []
    for root in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(HERE, root)):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
            if "__init__.py" in filenames:
                rel = os.path.relpath(dirpath, HERE)
                found.append("rlvr." + rel.replace(os.sep, "."))
    return sorted(found)


setup(
    packages=_packages(),
    package_dir={f"rlvr.{root}": root for root in ROOTS},
)
