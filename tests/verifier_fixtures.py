"""Verifiers used by bus tests, addressed by import path ("tests.verifier_fixtures:gate").

``gate`` holds its sample until a file appears (the test creates it when it
wants the verification to finish), so a test can kill or stop a verifier
while it provably holds a message, without racing on time.
"""

from __future__ import annotations

import os
import time

import msgspec

from rlvr.protocol import Verdict
from rlvr.verify.registry import Verifier, VerifyContext


class GateParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    gold: str = ""


def _gate(completion: str, params: GateParams, ctx: VerifyContext) -> Verdict:
    # Runs in a pool worker process, never in the event loop.
    while not os.path.exists(params.path):
        time.sleep(0.02)
    ok = completion.strip() == params.gold
    return Verdict(1.0 if ok else 0.0, "ok" if ok else "wrong", "gate", {"accuracy": float(ok)})


gate = Verifier(name="tests.verifier_fixtures:gate", params=GateParams, fn=_gate)


class PacedParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str  # while this file exists, each verification costs `seconds`
    seconds: float = 0.2
    gold: str = ""


def _paced(completion: str, params: PacedParams, ctx: VerifyContext) -> Verdict:
    # A verification with a cost (a code test that runs for a while), switched off by the test.
    if os.path.exists(params.path):
        time.sleep(params.seconds)
    ok = completion.strip() == params.gold
    return Verdict(1.0 if ok else 0.0, "ok" if ok else "wrong", "paced", {"accuracy": float(ok)})


paced = Verifier(name="tests.verifier_fixtures:paced", params=PacedParams, fn=_paced)
