"""Submit a verl GRPO launch to a running Ray cluster as a Ray job (``shopcomp grpo submit``; docs/grpo.md).

:func:`plan_job` turns the command of :func:`~shopping_companion.trainers.launch.launch_command`
into a Ray job: the entrypoint (the same verl command, run on the cluster's head node) and the job's
``runtime_env``, which every process of the job (the entrypoint, verl's TaskRunner, its workers and
agent-loop workers, on every node) runs in:

- ``working_dir``: a staged copy of ``configs/grpo`` (small; the entrypoint and every worker run in
  Ray's unpacked copy of it, so the Hydra config directory and ``agent_loop.yaml`` are given as
  paths relative to it), plus the spec's single-file modules and the YAML files next to them;
- ``py_modules``: this package's directory and the reward spec's own packages
  (:meth:`~shopping_companion.assembly.reward_spec.RewardSpec.py_modules`; its single-file modules are
  copied into the ``working_dir``, since Ray's ``py_modules`` takes directories only); Ray puts both
  on ``PYTHONPATH`` ahead of anything installed, so the nodes run the code of the submitting checkout. The spec sent
  to the job has an empty ``python_path`` (its modules are shipped; the directories need not exist
  on the nodes), and a rubric YAML it names (``rubric: my_rubric.yaml``, a plain rubric file,
  ``configs/rewards/paper_semantic.yaml``) is inlined: the job's spec carries the file's mapping
  instead of its path (:func:`_job_spec`), inside the verl config that reaches every process, so no
  path of the submitting machine is left in the job. The nodes still need the package's dependencies (verl, vLLM, ...) installed;
- ``env_vars``: ``HYDRA_FULL_ERROR=1``, ``VLLM_USE_V1=1``,
  ``VERL_USE_EXTERNAL_MODULES=shopping_companion.trainers.verl_plugin`` (see below), the harmless
  settings of this environment (``WANDB_MODE``/``WANDB_PROJECT``/..., ``SHOPCOMP_*`` without secret
  names, ``HF_HUB_OFFLINE``) and only the secrets named with ``--env-var`` (their values are never
  printed).

The ``grpo_judged`` advantage estimator registers itself when ``shopping_companion.trainers.verl_plugin``
is imported. A pip-installed package has it imported by verl's ``verl.plugins`` entry point; a
package shipped through ``py_modules`` has no installed metadata, so the entry point does not exist.
verl's own hook ``VERL_USE_EXTERNAL_MODULES`` (a comma-separated module list that ``import verl``
imports, in every process) does it instead; the job's ``env_vars`` carry it to every process.

:func:`submit_job` submits through Ray's ``JobSubmissionClient`` (the ray of this environment; no
API key ever appears on a command line). :func:`run_smoke` first runs a packaging check on the
cluster under the same ``runtime_env``: ``python -m shopping_companion.trainers.submit`` (this
module's ``__main__``), which, in the job's driver and in one task pinned to every alive node,
imports the package and the spec's modules (reporting the files they came from), builds the
spec's rubric, checks that ``import verl`` registers the advantage estimator, finds the staged
configs and the paths the run needs (rows, model, benchmark, checkpoint directory).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from shopping_companion.assembly.cluster import EXCLUDES, PACKAGE_DIR, PLUGIN_MODULE, worker_env_vars
from shopping_companion.errors import BackendError, ConfigError
from shopping_companion.trainers.launch import REWARD_CONFIG_KEY, reward_config_override

if TYPE_CHECKING:
    from shopping_companion.assembly.reward_spec import RewardSpec

__all__ = [
    "PLUGIN_MODULE",
    "JobPlan",
    "follow_commands",
    "host_lines",
    "job_entrypoint",
    "plan_job",
    "probe",
    "rubric_modules",
    "run_smoke",
    "smoke_args",
    "spec_files",
    "spec_of_override",
    "submit_job",
]

#: the staged config directory inside the job's working_dir
JOB_CONFIG_DIR = "configs/grpo"
#: the line prefix of the smoke job's report in its logs
SMOKE_MARK = "SHOPCOMP_SMOKE_REPORT "


def _default_address() -> str:
    a = os.environ.get("RAY_ADDRESS", "")
    return a if a.startswith(("http://", "https://")) else "http://127.0.0.1:8265"


def _ray_cli() -> str:
    """The ``ray`` executable of this interpreter's environment (else ``ray``)."""
    here = Path(sys.executable).with_name("ray")
    return str(here) if here.exists() else "ray"


def follow_commands(address: str, submission_id: str) -> dict[str, str]:
    """The ``ray job`` commands (this environment's ray) to follow, inspect and stop a job."""
    ray = shlex.quote(_ray_cli())
    a, i = shlex.quote(address), shlex.quote(submission_id)
    return {
        "logs": f"{ray} job logs --address {a} --follow {i}",
        "status": f"{ray} job status --address {a} {i}",
        "stop": f"{ray} job stop --address {a} {i}",
    }


#: suffixes of a rubric file a spec can name (``rubric: my_rubric.yaml``)
_YAML = (".yaml", ".yml")


def spec_files(spec: "RewardSpec") -> dict[str, str]:
    """The files of this machine ``spec`` names, by the spec field that names them: ``rubric``
    when it is a rubric YAML (a spec file's ``rubric: other.yaml``, a plain rubric file given as
    the spec, a ``paper_semantic``-style file; absolute after loading). The ``python_path``
    directories are shipped as modules (:meth:`RewardSpec.py_modules`), not listed here."""
    r = spec.rubric
    if isinstance(r, str) and (r.endswith(_YAML) or Path(r).expanduser().is_file()):
        return {"rubric": str(Path(r).expanduser())}
    return {}


def _job_spec(spec: "RewardSpec") -> "RewardSpec":
    """``spec`` as the job gets it, free of this machine's paths: its modules are shipped
    (py_modules / working_dir), so no ``python_path``; a rubric YAML (:func:`spec_files`) is
    inlined as the mapping it holds (``{name, rewards: [...]}``), so the rubric travels inside the
    spec's JSON in the verl config to every process, and no node needs the file. Raises
    :class:`ConfigError` naming a rubric file that cannot be read."""
    update: dict[str, Any] = {"python_path": []}
    rubric = spec_files(spec).get("rubric")
    if rubric is not None:
        from shopping_companion.config import load_config

        try:
            update["rubric"] = load_config(rubric)
        except ConfigError as e:
            where = f" (reward spec {spec.source})" if spec.source else ""
            raise ConfigError(
                f"rubric{where}: {e}; the job ships the rubric file's content, so it must be readable here"
            ) from None
    return spec.model_copy(update=update)


def _override_value(arg: str) -> str:
    """The value of a Hydra override ``key=value`` as Hydra reads it (quotes removed)."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        return str(OverridesParser.create().parse_override(arg).value())
    except ImportError:  # without hydra (a dry run from the main environment): one level of quotes
        raw = arg.split("=", 1)[1]
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            raw = raw[1:-1].replace("\\" + raw[0], raw[0])
        return raw
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors
        raise ConfigError(
            f"{arg.split('=', 1)[0]}: not a valid Hydra override value ({type(e).__name__}: {e})"
        ) from None


def _is_reward_override(arg: str) -> bool:
    return arg.lstrip("+").startswith(REWARD_CONFIG_KEY + "=")


def spec_of_override(cmd: Sequence[str]) -> Optional["RewardSpec"]:
    """The reward spec a Hydra override of :data:`REWARD_CONFIG_KEY` in ``cmd`` gives (the last
    one, as Hydra takes it) when it names files of this machine (a rubric YAML, ``python_path``);
    None otherwise (no override, or a built-in / ``module:attr`` that needs nothing shipped).
    Raises :class:`ConfigError` when the value does not load."""
    from shopping_companion.assembly.reward_spec import load_reward_spec

    args = [a for a in cmd if _is_reward_override(a)]
    if not args:
        return None
    spec = load_reward_spec(_override_value(args[-1]))
    return spec if spec_files(spec) or spec.python_path else None


def job_entrypoint(cmd: Sequence[str], python: str, spec: Optional["RewardSpec"] = None) -> str:
    """The shell command (Ray runs entrypoints with ``sh -c``) for launch command ``cmd`` inside the
    job: ``python`` for the interpreter, the config directory and the agent-loop registry relative
    to the job's working directory (its staged ``configs/grpo``), and with ``spec`` the reward
    config override replaced by the job's spec (:func:`_job_spec`: no ``python_path``, a rubric
    YAML inlined). Other arguments are quoted
    unchanged (absolute data and model paths must exist on the cluster). Raises
    :class:`ConfigError` when ``cmd`` is not a launch command."""
    cmd = list(cmd)
    if len(cmd) < 3 or cmd[1:3] != ["-m", "verl.trainer.main_ppo"]:
        raise ConfigError("cmd: expected a `python -m verl.trainer.main_ppo ...` command from launch_command")
    parts = [shlex.quote(python), "-m", "verl.trainer.main_ppo"]
    loop_default = str(Path(PACKAGE_DIR.parent, "configs", "grpo", "agent_loop.yaml"))
    for a in cmd[3:]:
        if a.startswith("--config-path="):
            parts.append(f'"--config-path=$PWD/{JOB_CONFIG_DIR}"')  # $PWD: the job's unpacked working_dir
            continue
        if a == f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_default}":
            a = f"actor_rollout_ref.rollout.agent.agent_loop_config_path={JOB_CONFIG_DIR}/agent_loop.yaml"
        elif spec is not None and _is_reward_override(a):
            a = a[: len(a) - len(a.lstrip("+"))] + reward_config_override(_job_spec(spec))
        parts.append(shlex.quote(a))
    return " ".join(parts)


@dataclass
class JobPlan:
    """A Ray job ready to submit: ``entrypoint`` (shell text), ``runtime_env`` (with the local
    ``working_dir`` and ``py_modules`` paths the client uploads), ``secret_names`` (env vars whose
    values must not be shown), the ``submission_id`` and the dashboard ``address``."""

    address: str
    submission_id: str
    entrypoint: str
    runtime_env: dict[str, Any]
    secret_names: list[str] = field(default_factory=list)
    staging: Optional[Path] = None
    #: the reward spec's module names the job ships, and which of them are single files (in working_dir)
    modules: list[str] = field(default_factory=list)
    module_files: list[str] = field(default_factory=list)
    #: other files of the spec's python_path directories copied into working_dir (YAML next to modules)
    data_files: list[str] = field(default_factory=list)
    #: the files whose content the job's spec carries instead of their path ({spec field: path})
    inlined: dict[str, str] = field(default_factory=dict)
    #: the reward spec the job ships (the one given, or the one a Hydra override names)
    spec: Optional["RewardSpec"] = None

    def printable(self) -> dict[str, Any]:
        """The plan as JSON-able data with the secrets' values replaced by ``***``."""
        env = dict(self.runtime_env)
        env["env_vars"] = {
            k: ("***" if k in self.secret_names else v) for k, v in dict(env.get("env_vars") or {}).items()
        }
        return {
            "address": self.address,
            "submission_id": self.submission_id,
            "entrypoint": self.entrypoint,
            "runtime_env": env,
            "working_dir_modules": list(self.module_files),
            "working_dir_files": list(self.data_files),
            "inlined": dict(self.inlined),
        }

    def cleanup(self) -> None:
        """Remove the staged working directory (after the client uploaded it)."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def _stage_configs(config_dir: Path) -> Path:
    """A fresh temporary directory holding ``configs/grpo/*.yaml`` copied from ``config_dir``."""
    root = Path(tempfile.mkdtemp(prefix="shopcomp-job-"))
    dest = root / JOB_CONFIG_DIR
    dest.mkdir(parents=True)
    for f in sorted(config_dir.glob("*.y*ml")):
        shutil.copy2(f, dest / f.name)
    return root


def plan_job(
    cmd: Sequence[str],
    spec: Optional["RewardSpec"] = None,
    *,
    address: Optional[str] = None,
    submission_id: Optional[str] = None,
    python: Optional[str] = None,
    secrets: Sequence[str] = (),
    config_dir: Optional[Path] = None,
) -> JobPlan:
    """The job for launch command ``cmd`` (module docstring). ``spec``: the reward spec in ``cmd``
    (its modules are shipped); ``address``: the dashboard URL (default ``$RAY_ADDRESS`` when it is
    an http URL, else ``http://127.0.0.1:8265``); ``submission_id`` (default
    ``shopcomp-<config>-<UTC time>``); ``python``: the interpreter on the head node (default this
    one); ``secrets``: names of environment variables to pass with their values (never printed).
    Stages ``config_dir`` (default ``configs/grpo`` of this checkout) in a temporary directory:
    call :meth:`JobPlan.cleanup` when done. Raises :class:`ConfigError` for a bad name or an unset
    secret."""
    name = next((a.split("=", 1)[1] for a in cmd if a.startswith("--config-name=")), "grpo")
    cfg_dir = Path(config_dir or next((a.split("=", 1)[1] for a in cmd if a.startswith("--config-path=")), ""))
    if not cfg_dir.is_dir():
        raise ConfigError(f"--config-path: {cfg_dir} is not a directory")
    sid = submission_id or f"shopcomp-{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", sid):
        raise ConfigError(f"--submission-id: {sid!r}: use letters, digits, '_', '.' and '-'")
    env, names = worker_env_vars(secrets)
    if spec is None:
        spec = spec_of_override(cmd)  # a Hydra override naming a spec file: ship what it names too
    job_spec = _job_spec(spec) if spec is not None else None  # reads (and checks) a rubric file now
    modules, files = [str(PACKAGE_DIR)], []
    for m in spec.py_modules() if spec is not None else []:
        if Path(m).name in ("shopping_companion", "shopping_companion.py"):
            raise ConfigError(f"python_path: {m} would shadow this package; rename it")
        # Ray's py_modules takes packages (directories); a single-file module travels in the
        # working_dir instead, which Ray also puts on every worker's PYTHONPATH
        (files if m.endswith(".py") else modules).append(m)
    # YAML files next to the modules (a module may read one with Path(__file__).with_name(...))
    data = [
        str(p)
        for d in (spec.python_path if spec is not None else [])
        if Path(d).is_dir()
        for p in sorted(Path(d).iterdir())
        if p.is_file() and p.suffix in _YAML and not p.name.startswith(".")
    ]
    seen: dict[str, str] = {Path(JOB_CONFIG_DIR).parts[0]: "the staged configs"}
    for f in [*files, *data]:
        if Path(f).name in seen:
            raise ConfigError(
                f"python_path: {f} and {seen[Path(f).name]} would both be {Path(f).name} in the job's working "
                "directory; rename one"
            )
        seen[Path(f).name] = f
    staging = _stage_configs(cfg_dir)
    for f in [*files, *data]:
        shutil.copy2(f, staging / Path(f).name)
    runtime_env = {"working_dir": str(staging), "py_modules": modules, "excludes": list(EXCLUDES), "env_vars": env}
    return JobPlan(
        address=address or _default_address(),
        submission_id=sid,
        entrypoint=job_entrypoint(cmd, python or sys.executable, spec),
        runtime_env=runtime_env,
        secret_names=names,
        staging=staging,
        modules=[Path(m).stem if m.endswith(".py") else Path(m).name for m in [*modules[1:], *files]],
        module_files=files,
        data_files=data,
        inlined=spec_files(spec) if spec is not None and job_spec is not None else {},
        spec=spec,
    )


def _client(address: str) -> Any:
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as e:
        raise ConfigError(
            f"grpo submit needs Ray's job client in this environment ({e}); use the environment that has verl "
            "(.venv-rl/bin/shopcomp, or pip install 'ray[default]')"
        ) from e
    try:
        return JobSubmissionClient(address)
    except Exception as e:  # noqa: BLE001 - connection refused, wrong URL, dashboard without the job module
        if "auth" in f"{type(e).__name__} {e}".lower():
            raise BackendError(
                f"--address {address}: the cluster uses Ray's token authentication ({type(e).__name__}); give this "
                "machine the head's token (RAY_AUTH_TOKEN, or the file ~/.ray/auth_token of the head node)"
            ) from None
        raise BackendError(
            f"--address {address}: no Ray dashboard with job submission answers there ({type(e).__name__}: {e}); "
            "start the cluster with `scripts/run_grpo.sh head` on node 0 (dashboard on 127.0.0.1:8265; from "
            "another machine tunnel it: ssh -L 8265:127.0.0.1:8265 NODE0)"
        ) from None


def submit_job(plan: JobPlan, entrypoint: Optional[str] = None, submission_id: Optional[str] = None) -> str:
    """Submit ``plan`` (or ``entrypoint`` under the plan's runtime_env) and return the submission
    id. Raises :class:`BackendError` when no dashboard answers at ``plan.address``,
    :class:`ConfigError` when Ray refuses the job (e.g. the id is taken)."""
    client = _client(plan.address)
    sid = submission_id or plan.submission_id
    try:
        return client.submit_job(
            entrypoint=entrypoint or plan.entrypoint,
            submission_id=sid,
            runtime_env=json.loads(json.dumps(plan.runtime_env)),
            metadata={"shopcomp": "grpo"},
        )
    except Exception as e:  # noqa: BLE001 - Ray raises RuntimeError with the server's message
        raise ConfigError(f"ray job submit {sid}: {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- packaging smoke job


def smoke_args(
    plan: JobPlan,
    spec: Optional["RewardSpec"],
    *,
    config_name: str,
    paths: Sequence[str],
    writable: Sequence[str] = (),
    adv_estimator: str = "grpo_judged",
    timeout_s: float = 240.0,
) -> dict[str, Any]:
    """What the smoke job checks: module names shipped besides the package (``modules``; those the
    rubric imports, :func:`rubric_modules`, as ``rubric_modules``), the job spec's JSON,
    the staged config, ``paths`` that must exist on every node, ``writable`` directories (e.g. the
    checkpoint directory) that must exist or be creatable there, the estimator to look up.
    ``spec`` None: the plan's (a spec named by a Hydra override)."""
    spec = spec if spec is not None else plan.spec
    return {
        "modules": list(plan.modules),
        "rubric_modules": rubric_modules(spec, plan.modules) if spec is not None else [],
        "spec": _job_spec(spec).to_json() if spec is not None else None,
        "config": f"{JOB_CONFIG_DIR}/{config_name}.yaml",
        "paths": [str(p) for p in paths],
        "writable": [str(p) for p in writable],
        "adv_estimator": adv_estimator,
        "timeout_s": float(timeout_s),
    }


def rubric_modules(spec: "RewardSpec", shipped: Sequence[str]) -> list[str] | None:
    """The names among ``shipped`` (top-level modules from ``spec.python_path``) that ``spec``'s
    rubric imports, found by building the rubric here and looking which of them are then in
    ``sys.modules`` with a file under a ``python_path`` directory. None when the rubric does not
    build here (the smoke job then treats every shipped module as needed)."""
    try:
        spec.build_rubric()
    except Exception:  # noqa: BLE001 - the smoke job reports it with the node's view
        return None
    dirs = [Path(d).resolve() for d in spec.python_path]
    used = []
    for name in shipped:
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        if f and any(Path(f).resolve().is_relative_to(d) for d in dirs):
            used.append(name)
    return used


def _shipped(path: Optional[str]) -> bool:
    return bool(path) and ("runtime_resources" in str(path) or "_ray_pkg_" in str(path))


def probe(args: dict[str, Any]) -> dict[str, Any]:
    """Run the packaging checks of ``args`` (:func:`smoke_args`) in this process; returns
    ``{host, python, cwd, package, shipped, modules, components, adv_estimator, problems,
    warnings}``. Every shipped module is imported; one that fails is a problem when the rubric
    imports it (``args["rubric_modules"]``; all of them when that is None) and a warning
    otherwise (an unrelated file in ``python_path``)."""
    import importlib
    import socket

    out: dict[str, Any] = {"host": socket.gethostname(), "python": sys.executable, "cwd": os.getcwd()}
    problems: list[str] = []
    import shopping_companion

    out["package"] = shopping_companion.__file__
    out["shipped"] = _shipped(shopping_companion.__file__)
    if not out["shipped"]:
        problems.append(f"shopping_companion was imported from {shopping_companion.__file__}, not the shipped copy")
    warnings: list[str] = []
    needed = args.get("rubric_modules")
    mods: dict[str, Optional[str]] = {}
    for m in args.get("modules") or []:
        into = problems if needed is None or m in needed else warnings
        try:
            mods[m] = getattr(importlib.import_module(m), "__file__", None)
            if not _shipped(mods[m]):
                into.append(f"module {m} was imported from {mods[m]}, not the shipped copy")
        except Exception as e:  # noqa: BLE001
            mods[m] = None
            why = "" if into is problems else " (the rubric does not use it)"
            into.append(f"module {m} does not import{why} ({type(e).__name__}: {e})")
    out["modules"] = mods
    out["warnings"] = warnings
    if args.get("spec"):
        try:
            from shopping_companion.assembly.reward_spec import load_reward_spec

            out["components"] = load_reward_spec(args["spec"]).component_keys()
        except Exception as e:  # noqa: BLE001
            problems.append(f"reward spec: the rubric does not build here ({type(e).__name__}: {e})")
    try:
        import verl  # noqa: F401 - VERL_USE_EXTERNAL_MODULES imports the plugin here
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        get_adv_estimator_fn(args.get("adv_estimator") or "grpo_judged")
        plugin = sys.modules.get(PLUGIN_MODULE)
        out["adv_estimator"] = {"registered": True, "plugin": getattr(plugin, "__file__", None)}
    except Exception as e:  # noqa: BLE001
        out["adv_estimator"] = {"registered": False}
        problems.append(f"algorithm.adv_estimator {args.get('adv_estimator')!r}: {type(e).__name__}: {e}")
    if args.get("config") and not Path(args["config"]).is_file():
        problems.append(f"{args['config']} is not in the job's working directory {os.getcwd()}")
    for p in args.get("paths") or []:
        if not Path(p).exists():
            problems.append(f"{p} does not exist on this node (it must be on shared storage, or at this path)")
    for p in args.get("writable") or []:
        q = Path(p)
        while not q.exists() and q != q.parent:
            q = q.parent
        if not os.access(q, os.W_OK):
            problems.append(f"{p}: cannot be created here ({q} is not writable)")
    out["problems"] = problems
    return out


def _cluster_report(args: dict[str, Any]) -> dict[str, Any]:
    """:func:`probe` in this process (the job's driver) and in one task on every alive node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(log_to_driver=False)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        task = ray.remote(num_cpus=0)(probe)
        refs = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(args)
            for n in nodes
        ]
        report: dict[str, Any] = {"driver": probe(args)}  # while the nodes run theirs
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=float(args.get("timeout_s") or 240))
        report["nodes"] = [ray.get(r) for r in ready]
        if pending:
            report["driver"]["problems"].append(f"{len(pending)} of {len(refs)} nodes did not answer in time")
    finally:
        ray.shutdown()
    return report


def run_smoke(plan: JobPlan, args: dict[str, Any], *, timeout_s: float = 300.0, poll_s: float = 1.0) -> dict[str, Any]:
    """Submit the packaging check (:func:`probe` on the driver and every node) under ``plan``'s
    runtime_env as job ``<id>-smoke``, wait for it (at most ``timeout_s``) and return
    ``{submission_id, status, report, problems, warnings, logs_tail}``; ``problems`` is empty when
    every process imported the shipped code and found what the run needs; ``warnings``: shipped
    modules the rubric does not use that fail to import (each line once per host). Raises :class:`BackendError`
    when no dashboard answers."""
    client = _client(plan.address)
    payload = base64.urlsafe_b64encode(json.dumps(args).encode()).decode()
    entry = f"{shlex.quote(plan.entrypoint.split(' ', 1)[0])} -m shopping_companion.trainers.submit {payload}"
    sid = submit_job(plan, entrypoint=entry, submission_id=f"{plan.submission_id}-smoke")
    deadline = time.monotonic() + timeout_s
    status = None
    while time.monotonic() < deadline:
        status = str(client.get_job_status(sid)).rsplit(".", 1)[-1]
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        time.sleep(poll_s)
    logs = client.get_job_logs(sid)
    problems: list[str] = []
    report = None
    for line in logs.splitlines():
        if line.startswith(SMOKE_MARK):
            report = json.loads(line[len(SMOKE_MARK) :])
    if status not in ("SUCCEEDED", "FAILED", "STOPPED"):
        client.stop_job(sid)
        problems.append(f"smoke job {sid} did not finish within {timeout_s:.0f} s (status {status}); stopped it")
    elif status != "SUCCEEDED":
        problems.append(f"smoke job {sid} ended {status}")
    warnings: list[str] = []
    if report is not None:
        problems += host_lines(report, "problems")
        warnings = host_lines(report, "warnings")
    elif not problems:
        problems.append(f"smoke job {sid} printed no report")
    return {
        "submission_id": sid,
        "status": status,
        "report": report,
        "problems": problems,
        "warnings": warnings,
        "logs_tail": logs[-3000:],
    }


def host_lines(report: dict[str, Any], key: str) -> list[str]:
    """The ``key`` entries (``problems`` or ``warnings``) of a smoke report's driver and nodes as
    ``"<host>: <line>"``, each once per host (the driver and a node's task on the same host
    report the same things), in the order first seen."""
    lines = []
    for where in [report.get("driver") or {}, *(report.get("nodes") or [])]:
        lines += [f"{where.get('host')}: {p}" for p in where.get(key) or []]
    return list(dict.fromkeys(lines))


def _main(argv: Sequence[str]) -> int:
    """The smoke job's entrypoint: ``python -m shopping_companion.trainers.submit <base64 JSON args>``."""
    # the module by its name (not __main__), so Ray pickles probe by reference: each node imports it
    from shopping_companion.trainers.submit import _cluster_report

    args = json.loads(base64.urlsafe_b64decode(argv[0].encode()).decode())
    report = _cluster_report(args)
    print(SMOKE_MARK + json.dumps(report), flush=True)
    bad = [p for w in [report["driver"], *report.get("nodes", [])] for p in w["problems"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
