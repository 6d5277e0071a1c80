"""What the LLaMA-Factory suite's modules share: the environment its commands run in
(:data:`LF_ENV`) and :func:`llamafactory_cli`, which runs several ``llamafactory-cli`` commands in
one interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

LF_ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "WANDB_DISABLED": "true",
    "DISABLE_VERSION_CHECK": "1",
    "OMP_NUM_THREADS": "2",
    "TOKENIZERS_PARALLELISM": "false",
}

#: ``python -c`` program: LLaMA-Factory's own console entry point (what ``llamafactory-cli`` runs),
#: once per command with ``sys.argv`` as that command line sets it; a marker line on stdout and
#: stderr before each command separates their outputs
_DRIVER = """
import json, sys
from llamafactory.cli import main
mark, commands = sys.argv[1], json.loads(sys.argv[2])
for args in commands:
    print(mark, flush=True)
    print(mark, file=sys.stderr, flush=True)
    sys.argv = ["llamafactory-cli", *args]
    main()
"""
_MARK = "==== shopcomp-test: next llamafactory-cli command ===="


def llamafactory_cli(*commands: list[str], cwd: Path, timeout: int = 600) -> tuple[float, list[str]]:
    """Run ``llamafactory-cli ARGS`` for each ``ARGS`` of ``commands`` in order, in one Python
    process of this interpreter (``llamafactory.cli.main``, the command's entry point), so
    LLaMA-Factory's imports (10-20 CPU-s on the 2-core machine) are paid once instead of once a
    command. Returns (wall seconds of the whole run, each command's output: the end of its stdout
    then of its stderr); a non-zero exit fails the test with the output."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", _DRIVER, _MARK, json.dumps([list(c) for c in commands])]
    p = subprocess.run(cmd, cwd=cwd, env=LF_ENV, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    outs, errs = p.stdout.split(_MARK + "\n")[1:], p.stderr.split(_MARK + "\n")[1:]
    assert len(outs) == len(errs) == len(commands), p.stdout[-3000:] + p.stderr[-6000:]
    return time.perf_counter() - t0, [o[-3000:] + e[-6000:] for o, e in zip(outs, errs)]
