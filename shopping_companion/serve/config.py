"""``ServeConfig``: the configuration of ``shopcomp serve`` (docs/cluster.md).

``shopcomp serve --config configs/serve/local.yaml`` reads it; ``--host`` / ``--port`` and
``--set dotted.key=value`` override it (:func:`load_serve_config`, which uses the one loader
:func:`shopping_companion.config.load_model`). Every model is strict: unknown keys are refused,
naming the known ones.

Groups:

- ``benchmarks``: name -> benchmark directory (at least one); requests name a benchmark by its key;
- ``data``: the catalog and the BM25 index (:class:`~shopping_companion.assembly.settings.DataConfig`,
  as ``shopcomp eval``'s ``data``);
- ``reward_config``: the reward spec (judge + rubric) the service scores with, in any
  :func:`~shopping_companion.assembly.reward_spec.load_reward_spec` form (``paper``, ``outcome_only``, a
  YAML file, ``module:attr``), as ``shopcomp eval``'s ``rubric``;
- ``host`` / ``port``: where Ray Serve's HTTP proxy listens; ``token_env``: the variable holding
  the bearer token (unset: no token is asked for; a non-loopback ``host`` then is refused);
- ``memory_cache``: memory stores kept per ``MemoryTools`` replica (LRU);
- ``batch``: how MiniLM query encodings of concurrent ``mem_search`` requests are batched;
- ``direct``: whether replicas also serve their routes on direct endpoints (docs/cluster.md,
  "Request path");
- ``deployments``: replicas, CPUs and concurrency of each deployment.

Secrets never enter the config: the token is read from the environment variable ``token_env`` names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from shopping_companion.config import STRICT
from shopping_companion.assembly.reward_spec import check_reward_spec
from shopping_companion.assembly.settings import DataConfig
from shopping_companion.serve.api import DEFAULT_TOKEN_ENV

__all__ = [
    "DEPLOYMENT_NAMES",
    "describe_reserved",
    "fits_cluster",
    "BatchConfig",
    "DirectConfig",
    "DeploymentConfig",
    "DeploymentsConfig",
    "LOOPBACK_HOSTS",
    "ServeConfig",
    "is_loopback",
    "load_serve_config",
]


#: Host names that only this machine can reach.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

_BENCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_loopback(host: str) -> bool:
    """``host`` is a loopback name or address (127.0.0.0/8 in any form ``inet_aton`` reads, such as
    ``127.1``; ``::1``; ``localhost``)."""
    import ipaddress

    h = host.strip("[]").lower()
    if h in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    import socket

    try:  # the short IPv4 forms the resolver accepts too: 127.1, 2130706433
        return ipaddress.ip_address(socket.inet_aton(h)).is_loopback
    except (OSError, ValueError):
        return False


def _no_bool(v: Any) -> Any:
    """A number field's before-validator: YAML's ``true`` / ``false`` would otherwise pass as 1 / 0."""
    if isinstance(v, bool):
        raise ValueError(f"must be a number, got {v!r}")
    return v


class BatchConfig(BaseModel):
    """Batching of MiniLM query encodings across concurrent ``mem_search`` requests of one
    ``MemoryTools`` replica (Ray Serve's ``@serve.batch``): up to ``max_batch_size`` requests
    (>= 1) are encoded together, waiting at most ``batch_wait_timeout_s`` seconds (>= 0) for the
    batch to fill. ``enabled: false`` (or ``max_batch_size: 1``) encodes each request alone."""

    model_config = STRICT
    enabled: bool = True
    max_batch_size: int = Field(default=64, ge=1, le=4096)
    batch_wait_timeout_s: float = Field(default=0.002, ge=0.0, le=10.0)

    _numbers = field_validator("max_batch_size", "batch_wait_timeout_s", mode="before")(_no_bool)


class DirectConfig(BaseModel):
    """Direct endpoints (:mod:`~shopping_companion.serve.direct`): with ``enabled`` (default) every
    ``ProductTools`` / ``MemoryTools`` / ``Scoring`` replica also serves its routes over plain HTTP
    on an ephemeral port of its node, listed by ``GET /v1/endpoints``; clients send tool calls
    there (about 1 ms instead of tens of ms through Ray Serve's proxy and ingress) and fall back
    to the service URL. ``enabled: false``: only Ray Serve's request path (one port to open)."""

    model_config = STRICT
    enabled: bool = True


class DeploymentConfig(BaseModel):
    """One Ray Serve deployment: ``num_replicas`` (>= 1) processes, ``num_cpus`` (>= 0, may be a
    fraction) reserved by each, and ``max_ongoing_requests`` (>= 1) a replica serves at once."""

    model_config = STRICT
    num_replicas: int = Field(default=1, ge=1, le=1024)
    num_cpus: float = Field(default=1.0, ge=0.0, le=1024.0)
    max_ongoing_requests: int = Field(default=32, ge=1, le=100_000)

    _numbers = field_validator("num_replicas", "num_cpus", "max_ongoing_requests", mode="before")(_no_bool)


class DeploymentsConfig(BaseModel):
    """The four deployments: ``products`` (BM25 product index), ``memory`` (memory stores and
    MiniLM), ``scoring`` (judge and rubric) and ``ingress`` (the HTTP API)."""

    model_config = STRICT
    products: DeploymentConfig = DeploymentConfig(num_cpus=0.5, max_ongoing_requests=32)
    memory: DeploymentConfig = DeploymentConfig(num_cpus=1.0, max_ongoing_requests=64)
    scoring: DeploymentConfig = DeploymentConfig(num_cpus=0.25, max_ongoing_requests=32)
    ingress: DeploymentConfig = DeploymentConfig(num_cpus=0.1, max_ongoing_requests=256)

    @model_validator(mode="before")
    @classmethod
    def _over_defaults(cls, data: Any) -> Any:
        """A partial group (``products: {num_replicas: 3}``) keeps that deployment's other defaults."""
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for name, given in data.items():
            field = cls.model_fields.get(name)
            if field is not None and isinstance(given, Mapping) and isinstance(field.default, DeploymentConfig):
                out[name] = {**field.default.model_dump(), **given}
        return out

    def reserved_cpus(self) -> dict[str, float]:
        """CPUs each deployment reserves in all (``num_replicas * num_cpus``), by name."""
        return {n: getattr(self, n).num_replicas * getattr(self, n).num_cpus for n in DEPLOYMENT_NAMES}


#: The deployments' names in :class:`DeploymentsConfig` (the keys of ``deployments:``).
DEPLOYMENT_NAMES = ("products", "memory", "scoring", "ingress")


def describe_reserved(deployments: DeploymentsConfig) -> str:
    """``"the replicas reserve 1.85 CPUs (products 0.5, memory 1, scoring 0.25, ingress 0.1)"``."""
    need = deployments.reserved_cpus()
    parts = ", ".join(f"{n} {v:g}" for n, v in need.items())
    return f"the replicas reserve {sum(need.values()):g} CPUs ({parts})"


def fits_cluster(deployments: DeploymentsConfig, cluster_cpus: float) -> str | None:
    """None when the replicas' CPU reservations fit a cluster of ``cluster_cpus`` CPUs, else a
    message naming each deployment's reservation and the fields to change. Ray Serve would
    otherwise wait forever for replicas it cannot place (a fixed-size cluster never grows)."""
    if sum(deployments.reserved_cpus().values()) <= cluster_cpus + 1e-9:
        return None
    return (
        f"deployments: {describe_reserved(deployments)} but the Ray cluster has {cluster_cpus:g}; "
        "lower deployments.<name>.num_cpus or num_replicas (fractions are allowed), or start Ray with more CPUs "
        "(--num-cpus, more nodes)"
    )


class ServeConfig(BaseModel):
    """The configuration of ``shopcomp serve`` (module docstring).

    ``benchmarks``: name (1–128 of ``A-Z a-z 0-9 . _ -``, starting alphanumeric) -> benchmark
    directory written by ``shopcomp synth`` (at least one; checked when the service loads it).
    ``data``: catalog data directory and BM25 index directory (defaults as ``shopcomp eval``).
    ``reward_config``: the reward spec (must load). ``host``: the address the HTTP proxy binds
    (default ``127.0.0.1``); ``port``: 1–65535 (default 8000). ``token_env``: the environment
    variable holding the bearer token (default ``SHOPCOMP_SERVE_TOKEN``). ``memory_cache``: memory
    stores kept per ``MemoryTools`` replica (>= 1). ``batch``: :class:`BatchConfig`;
    ``direct``: :class:`DirectConfig`; ``deployments``: :class:`DeploymentsConfig`.

    Raises (through :func:`load_serve_config`) :class:`~shopping_companion.errors.ConfigError`
    naming the field for any bad value, and naming ``host`` and ``token_env`` when a non-loopback
    ``host`` is configured while ``token_env`` is unset or empty in this process's environment.
    """

    model_config = STRICT
    benchmarks: dict[str, Path] = Field(min_length=1)
    data: DataConfig = DataConfig()
    reward_config: str = "paper"
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    token_env: str = DEFAULT_TOKEN_ENV
    memory_cache: int = Field(default=256, ge=1, le=1_000_000)
    batch: BatchConfig = BatchConfig()
    direct: DirectConfig = DirectConfig()
    deployments: DeploymentsConfig = DeploymentsConfig()

    @field_validator("benchmarks")
    @classmethod
    def _bench_names(cls, v: dict[str, Path]) -> dict[str, Path]:
        for name in v:
            if not _BENCH_NAME.fullmatch(name):
                raise ValueError(
                    f"benchmark name {name!r} must be 1-128 characters of A-Z a-z 0-9 . _ - starting with a "
                    "letter or digit"
                )
        return v

    _reward_spec_loads = field_validator("reward_config")(check_reward_spec)

    _numbers = field_validator("port", "memory_cache", mode="before")(_no_bool)

    @field_validator("host", mode="before")
    @classmethod
    def _host_text(cls, v: Any) -> Any:
        if not isinstance(v, str):  # YAML reads an unquoted `::` as a mapping
            raise ValueError(
                f"must be a host name or address string, got {v!r} (with --set, quote an IPv6 address: "
                "--set 'host=\"::\"', or use --host ::)"
            )
        return v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not v.strip() or any(c.isspace() for c in v):
            raise ValueError(f"must be a host name or address such as 127.0.0.1 or 0.0.0.0, got {v!r}")
        return v

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not _ENV_NAME.fullmatch(v):
            raise ValueError(f"must be an environment variable name (letters, digits, _), got {v!r}")
        return v

    @model_validator(mode="after")
    def _token_when_exposed(self) -> "ServeConfig":
        if not is_loopback(self.host) and not self.token():
            raise ValueError(
                f"host {self.host!r} is reachable from other machines, but token_env {self.token_env} is not set "
                f"in the environment: export {self.token_env}=<a long random secret> (clients send it as a bearer "
                "token), or bind host 127.0.0.1"
            )
        return self

    def token(self) -> str | None:
        """The bearer token (the value of ``token_env`` in this process's environment), or None
        when it is unset or empty (then no route asks for one)."""
        return os.environ.get(self.token_env) or None


def load_serve_config(
    config: str | os.PathLike[str] | Mapping[str, Any] | None,
    sets: Iterable[str] = (),
    *,
    host: str | None = None,
    port: int | None = None,
) -> ServeConfig:
    """The resolved :class:`ServeConfig`: ``config`` (a YAML file or a mapping) < ``host`` /
    ``port`` (flags; None: not given) < ``sets`` (``dotted.key=value``). Raises
    :class:`~shopping_companion.errors.ConfigError` naming the file and each bad field."""
    from shopping_companion.config import load_model

    return load_model(
        ServeConfig, config, sets, {"host": host, "port": port}, names={"host": "--host", "port": "--port"}
    )
