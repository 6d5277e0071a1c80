"""A stand-in for the ``vllm`` executable in script tests: ``fake_vllm.py serve MODEL --port P
--served-model-name NAME [anything else]`` serves the scripted policy (tests/scripted_policy.py)
for the tasks of the benchmark in ``$FAKE_VLLM_BENCH`` on 127.0.0.1:P until SIGTERM, after an
optional ``$FAKE_VLLM_STARTUP_S`` delay (to exercise the readiness wait). It writes the argv it got
to ``$FAKE_VLLM_ARGV`` (JSON) so tests can check what the scripts passed."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopping_companion.benchmark.synth import load_benchmark  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_VLLM_ARGV"):
        Path(os.environ["FAKE_VLLM_ARGV"]).write_text(json.dumps(argv))
    assert argv[0] == "serve", argv
    port = int(argv[argv.index("--port") + 1])
    name = argv[argv.index("--served-model-name") + 1]
    if "--lora-modules" in argv:
        name = argv[argv.index("--lora-modules") + 1].split("=")[0]
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0")))
    tasks = load_benchmark(os.environ["FAKE_VLLM_BENCH"]).tasks
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ScriptedOpenAIServer(policy_script(tasks), port=port, model=name):
        print(f"fake vllm serving {name} on {port}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
