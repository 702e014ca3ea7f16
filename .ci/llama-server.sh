#!/usr/bin/env bash
# Builds a real llama.cpp `llama-server` on CPU, plus a tiny random-weight Llama in GGUF for it to serve,
# for the interop test tests/interop/test_llama_server.py (`rigctl verify --url` against the real server).
# The llama.cpp source is the tree vendored in the llama-cpp-python sdist on PyPI (the only place this
# workplace can get it from); the GGUF is written by the `gguf` package (tests/interop/build_tiny_gguf.py).
# Idempotent: a binary or model whose stamp matches these pins is kept. The build takes about 15 minutes on
# 2 cores, so .ci/test.sh does not run this by itself; the interop test runs only when the binary is present
# (or RIGCTL_LLAMA_SERVER names one).
#   needs cmake, ninja-build and g++ (.ci/test.sh installs them first)
#   usage: bash .ci/llama-server.sh      (prints where the binary and the model are, and how long each took)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${RIGCTL_LLAMA_DIR:-$PWD/.cache/llama-server}
PY=${PYTHON:-python3}
SDIST_PIN=llama-cpp-python==0.3.36
GGUF_PIN=gguf==0.19.0
JOBS=${JOBS:-$(nproc)}
# -O1, not Release's -O3: the test serves a model of a few kilobytes, so code speed does not matter and the
# build is the cost (OPT=-O3 builds what a user would run)
OPT=${OPT:--O1}
mkdir -p "$OUT"
start=$(date +%s)

# --- the server binary ---------------------------------------------------------------------------
BIN_WANT="$SDIST_PIN cpu static noui $OPT"
if [[ -x "$OUT/bin/llama-server" && "$(cat "$OUT/bin/.rigctl-stamp" 2>/dev/null)" == "$BIN_WANT" ]]; then
  echo "llama-server: $OUT/bin/llama-server up to date"
else
  rm -rf "$OUT/src" "$OUT/build" "$OUT/bin"
  mkdir -p "$OUT/src" "$OUT/bin"
  # The sdist file itself, from PyPI's JSON API, checked against the index's sha256. Not `pip download
  # --no-binary :all:`: that builds the package's metadata, and with it every build dependency from source
  # (scikit-build-core, hatchling, setuptools-scm...), which took longer than the compiler here.
  "$PY" - "$SDIST_PIN" "$OUT/src" <<'PYEOF'
import hashlib, json, os, sys, urllib.parse, urllib.request
name, version = sys.argv[1].split("==")
index = os.environ.get("RIGCTL_PYPI", "https://pypi.org").rstrip("/")
page = f"{index}/pypi/{name}/json"
with urllib.request.urlopen(page, timeout=120) as answer:  # what every index serves
    meta = json.loads(answer.read(64 << 20))
entry = next(u for u in meta["releases"][version] if u["packagetype"] == "sdist")
with urllib.request.urlopen(urllib.parse.urljoin(page, entry["url"]), timeout=600) as answer:  # may be relative
    data = answer.read(512 << 20)
if hashlib.sha256(data).hexdigest() != entry["digests"]["sha256"]:
    sys.exit(f"llama-server: {entry['filename']}: sha256 is not the index's")
with open(os.path.join(sys.argv[2], entry["filename"]), "wb") as out:
    out.write(data)
print(f"llama-server: fetched {entry['filename']} ({len(data) >> 20} MiB)")
PYEOF
  tar -xzf "$OUT"/src/llama_cpp_python-*.tar.gz -C "$OUT/src"
  TREE=$(echo "$OUT"/src/llama_cpp_python-*/vendor/llama.cpp)
  [[ -f "$TREE/tools/server/server.cpp" ]] || { echo "llama-server: no server source in $TREE" >&2; exit 1; }
  # CPU only, portable (no -march=native), no network at build or run time (no curl, no OpenSSL, no
  # prebuilt web UI download), one static binary that can be copied around.
  cmake -S "$TREE" -B "$OUT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_C_FLAGS_RELEASE=$OPT -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=$OPT -DNDEBUG" \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF >"$OUT/cmake.log" 2>&1 \
    || { tail -30 "$OUT/cmake.log" >&2; exit 1; }
  cmake --build "$OUT/build" --target llama-server -j "$JOBS" >"$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log" >&2; exit 1; }
  cp "$OUT/build/bin/llama-server" "$OUT/bin/llama-server"
  "$OUT/bin/llama-server" --version >/dev/null 2>&1 || { echo "llama-server: the built binary does not run" >&2; exit 1; }
  echo "$BIN_WANT" >"$OUT/bin/.rigctl-stamp"
  rm -rf "$OUT/build" "$OUT/src"  # 1+ GB of objects; the binary is all the test needs
  echo "llama-server: built in $(( $(date +%s) - start ))s -> $OUT/bin/llama-server"
fi

# --- the tiny model ------------------------------------------------------------------------------
t1=$(date +%s)
MODEL_WANT="$GGUF_PIN $(sha256sum tests/interop/build_tiny_gguf.py | cut -d' ' -f1)"
if [[ -f "$OUT/tiny-llama.gguf" && "$(cat "$OUT/.model-stamp" 2>/dev/null)" == "$MODEL_WANT" ]]; then
  echo "llama-server: model $OUT/tiny-llama.gguf present"
else
  VENV="$OUT/gguf-venv"
  if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c "import gguf, numpy" 2>/dev/null; then
    rm -rf "$VENV"
    # uv (tools/uv.py finds or fetches it), not `python3 -m venv`: Debian's python3 has no venv module
    # without python3-venv
    "$PY" tools/uv.py venv --quiet --python "$PY" "$VENV"
    "$PY" tools/uv.py pip install --quiet --python "$VENV/bin/python" "$GGUF_PIN"
  fi
  "$VENV/bin/python" tests/interop/build_tiny_gguf.py "$OUT/tiny-llama.gguf"
  echo "$MODEL_WANT" >"$OUT/.model-stamp"
  echo "llama-server: tiny model built in $(( $(date +%s) - t1 ))s -> $OUT/tiny-llama.gguf"
fi
echo "llama-server: total $(( $(date +%s) - start ))s"
