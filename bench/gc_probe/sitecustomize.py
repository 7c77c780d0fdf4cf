"""Count what Python's garbage collector and message decoding cost each role of a run (issue 45).

Put this folder on PYTHONPATH for `rlvr-actor up`; every role process (`--role ...`) then writes, at exit,
``<RLVR_GC_PROBE_OUT>/<label>_<role>-<replica>.json``: collections and their CPU seconds per generation
(``gc.callbacks``, the CPU of the thread that collects), the objects they freed, the CPU seconds and count
of ``rlvr.protocol.codec`` decodes (collections triggered inside a decode included), the process's own CPU
seconds and peak RSS, and the objects the collector tracks at the end.

    mkdir -p /tmp/gc && RLVR_GC_PROBE_OUT=/tmp/gc RLVR_GC_PROBE_LABEL=default PYTHONPATH=$PWD/bench/gc_probe \\
        OMP_NUM_THREADS=1 rlvr-actor up --config <config> --set learn.steps=100

The path must be absolute: a runner that starts ``up`` in another folder (``bench/role_cpu.py`` does)
would otherwise load no probe, silently.

``RLVR_GC_PROBE_THRESHOLD=50000,10,10`` sets ``gc.set_threshold`` first (the A/B in docs/benchmarks.md).
A measuring aid only: nothing in the project imports it.
"""

import atexit
import builtins
import gc
import json
import os
import resource
import sys
import time

if "--role" in sys.argv and os.environ.get("RLVR_GC_PROBE_OUT"):
    _argv = sys.argv
    _ROLE = _argv[_argv.index("--role") + 1] + ("-" + _argv[_argv.index("--replica") + 1] if "--replica" in _argv else "")
    _stats = {"gc_collections": [0, 0, 0], "gc_cpu_s": [0.0, 0.0, 0.0], "gc_freed": [0, 0, 0],
              "decodes": 0, "decodes_by_type": {}, "decode_cpu_s": 0.0}
    _started: list[float] = []

    def _on_gc(phase, info):
        if phase == "start":
            _started.append(time.thread_time())
        elif _started:
            g = info["generation"]
            _stats["gc_cpu_s"][g] += time.thread_time() - _started.pop()
            _stats["gc_collections"][g] += 1
            _stats["gc_freed"][g] += info["collected"]

    gc.callbacks.append(_on_gc)
    if os.environ.get("RLVR_GC_PROBE_THRESHOLD"):
        gc.set_threshold(*(int(x) for x in os.environ["RLVR_GC_PROBE_THRESHOLD"].split(",")))

    class _Timed:
        def __init__(self, decoder, name):
            self.decoder, self.name = decoder, name

        def decode(self, data):
            t = time.thread_time()
            try:
                return self.decoder.decode(data)
            finally:
                _stats["decodes"] += 1
                _stats["decodes_by_type"][self.name] = _stats["decodes_by_type"].get(self.name, 0) + 1
                _stats["decode_cpu_s"] += time.thread_time() - t

    _import = builtins.__import__

    _wrapped: list[bool] = []

    def _import_and_wrap(name, *args, **kwargs):
        module = _import(name, *args, **kwargs)
        codec = sys.modules.get("rlvr.protocol.codec")
        if not _wrapped and hasattr(codec, "_decoders"):  # once: imports nest, and an outer one returns later
            _wrapped.append(True)
            builtins.__import__ = _import
            for typ, decoder in list(codec._decoders.items()):
                codec._decoders[typ] = _Timed(decoder, typ.__name__)
        return module

    builtins.__import__ = _import_and_wrap

    @atexit.register
    def _write():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _stats.update(role=_ROLE, cpu_s=usage.ru_utime + usage.ru_stime, peak_rss_mib=usage.ru_maxrss / 1024,
                      tracked=len(gc.get_objects()), threshold=list(gc.get_threshold()))
        label = os.environ.get("RLVR_GC_PROBE_LABEL", "run")
        with open(os.path.join(os.environ["RLVR_GC_PROBE_OUT"], f"{label}_{_ROLE}.json"), "w") as f:
            json.dump(_stats, f)
