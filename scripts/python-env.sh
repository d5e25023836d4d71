# Sourced by scripts: makes a virtualenv with the pinned Python references (gguf-py, the openai
# client) and puts it first on PATH. Re-used across runs; POCKET_PYENV overrides its location.
POCKET_PYENV="${POCKET_PYENV:-$PWD/.cache/pyenv}"
if [ ! -x "$POCKET_PYENV/bin/python" ] || ! cmp -s scripts/requirements.txt "$POCKET_PYENV/requirements.txt"; then
    python3 -m venv "$POCKET_PYENV"
    "$POCKET_PYENV/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
    cp scripts/requirements.txt "$POCKET_PYENV/requirements.txt"
fi
export PATH="$POCKET_PYENV/bin:$PATH"
export POCKET_PYTHON="$POCKET_PYENV/bin/python"
