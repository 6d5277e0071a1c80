# Sourced by scripts/install*.sh: one home for creating a virtual environment and installing into
# it. The installer is uv (pinned below: `uv pip install` resolves the same pins as pip, downloads in
# parallel and keeps its own cache, ~/.cache/uv, so a second install on a machine takes seconds);
# pip is the fallback when uv cannot be installed or fails, and the choice when
# SHOPCOMP_INSTALLER=pip. pip's own configuration (find-links, index URLs, constraint files, certificate
# bundle, timeout: pip.conf and PIP_* variables) is handed to uv, so both install from the same places.
#   venv_create VENV PYTHON   create VENV from PYTHON when missing; choose the installer
#   venv_install VENV ARGS... `pip install ARGS` into VENV with the chosen installer
UV_VERSION=0.13.10

venv_create() {
    local venv=$1 python=$2 v
    case "${SHOPCOMP_INSTALLER:-uv}" in
        uv | pip) ;;
        *)
            echo "SHOPCOMP_INSTALLER: '${SHOPCOMP_INSTALLER}' is not an installer; allowed: uv, pip" >&2
            return 2
            ;;
    esac
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    INSTALL_UV=""
    if [ "${SHOPCOMP_INSTALLER:-uv}" = uv ]; then
        if "$venv/bin/python" -m pip install -q "uv==$UV_VERSION"; then
            INSTALL_UV="$venv/bin/uv"
        else
            echo "== uv $UV_VERSION could not be installed: installing with pip" >&2
        fi
    fi
    if [ -z "$INSTALL_UV" ]; then
        "$venv/bin/python" -m pip install -q --upgrade pip
        return 0
    fi
    # pip's sources, constraints, certificates and timeout, so that uv picks what pip would (pip
    # merges all indexes: unsafe-best-match is uv's name for that)
    UV_ARGS=(--index-strategy unsafe-best-match)
    UV_ENV=()
    local conf
    conf=$("$venv/bin/python" -m pip config list 2>/dev/null || true)
    while read -r v; do UV_ARGS+=(--find-links "$v"); done < <(_pip_setting "$conf" find-links)
    while read -r v; do UV_ARGS+=(--default-index "$v"); done < <(_pip_setting "$conf" index-url)
    while read -r v; do UV_ARGS+=(--index "$v"); done < <(_pip_setting "$conf" extra-index-url)
    while read -r v; do UV_ARGS+=(--constraint "$v"); done < <(_pip_setting "$conf" constraint)
    case "$(_pip_setting "$conf" no-index | head -n 1)" in
        1 | true | yes | on) UV_ARGS+=(--no-index) ;;  # pip's no-index: the find-links only
    esac
    v=$(_pip_setting "$conf" cert | head -n 1)
    [ -z "$v" ] || UV_ENV+=("SSL_CERT_FILE=$v")
    v=$(_pip_setting "$conf" default-timeout | head -n 1)
    [ -z "$v" ] || UV_ENV+=("UV_HTTP_TIMEOUT=$v")
}

# _pip_setting CONFIG KEY: the values of KEY (find-links, index-url, ...) in CONFIG, the output of
# `pip config list` (pip's config files and PIP_* variables), one per line
_pip_setting() {
    sed -n "s/^[^=]*\.$2='\(.*\)'\$/\1/p" <<<"$1" | tr ' ' '\n' | sed '/^$/d' | sort -u
}

venv_install() {
    local venv=$1
    shift
    if [ -n "${INSTALL_UV:-}" ]; then
        if env "${UV_ENV[@]}" "$INSTALL_UV" pip install -q --python "$venv/bin/python" "${UV_ARGS[@]}" "$@"; then
            return 0
        fi
        echo "== uv pip install $* failed: installing with pip instead" >&2
        INSTALL_UV=""
        "$venv/bin/python" -m pip install -q --upgrade pip
    fi
    "$venv/bin/python" -m pip install -q "$@"
}
