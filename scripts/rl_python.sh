# Sourced by run_grpo.sh and gpu_smoke.sh (from the repository root): sets PY, the Python that has
# verl and this package — $PYTHON, else `python` when it imports both, else .venv-rl/bin/python —
# and RAY, the `ray` of that interpreter's environment (else the one on PATH).
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif ! python -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("verl") and u.find_spec("shopping_companion")))' >/dev/null 2>&1 \
    && [ -x .venv-rl/bin/python ]; then
  PY=.venv-rl/bin/python
else
  PY=python
fi
RAY="$(dirname "$(command -v "$PY" || echo "$PY")")/ray"
[ -x "$RAY" ] || RAY=ray
