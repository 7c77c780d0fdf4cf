"""The shared runtime never imports a role: a running verifier has loaded no
rollout or learner module.

The check is made on a real ``--role verify`` process, after its start-up is
done (its heartbeat says "running"), not on an import of one module: a lazy
import anywhere on the start-up path would show up here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from tests.busclient import BusClient
from tests.conftest import REPO, wait_for, write_config

_DUMP_ON_USR1 = textwrap.dedent(
    """
    import signal, sys
    out = sys.argv[1]
    def dump(signum, frame):
        with open(out, "w") as f:
            f.write("\\n".join(sorted(sys.modules)))
    signal.signal(signal.SIGUSR1, dump)
    from rlvr.cli.main import main
    sys.exit(main(sys.argv[2:]))
    """
)


def test_running_verify_role_loads_no_rollout_or_learner_module(tmp_path, nats_server):
    cfg = write_config(tmp_path / "run.json", {"run": "imports", "verify": {"pool_size": 1}})
    init = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "init", "--config", str(cfg), "--nats", nats_server.url],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert init.returncode == 0, init.stderr
    dump = tmp_path / "modules.txt"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    log = open(tmp_path / "verify.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-c", _DUMP_ON_USR1, str(dump), "--role", "verify", "--config", str(cfg),
         "--nats", nats_server.url, "--replica", "verify-0"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True,
    )
    try:
        bus = BusClient(nats_server.url, "imports")
        bus.wait_heartbeat(lambda hb: hb.replica == "verify-0" and hb.state == "running", timeout_s=90)
        os.kill(proc.pid, signal.SIGUSR1)
        wait_for(dump.exists, timeout_s=30, what="the module list")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    modules = dump.read_text().split()
    assert "rlvr.verify.actor" in modules  # the dump was taken inside the running role
    leaked = [m for m in modules if m.startswith(("rlvr.rollout", "rlvr.learner", "torch", "transformers", "vllm"))]
    assert leaked == []
