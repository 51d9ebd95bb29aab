# One image for every ragline service (API, migrations, Ray head and workers): the same code
# and the same Ray/Python versions on every node, which a Ray cluster requires.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    RAY_USAGE_STATS_ENABLED=0

# curl for the /readyz health checks, procps (pgrep) for the Ray worker health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The CPU build of torch first, from PyTorch's CPU index, so the project's dependencies do not
# pull a CUDA build (GPU images: build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install torch==2.13.0 --index-url "${TORCH_INDEX}"

# The whole build context (.dockerignore keeps tests, docs, caches, virtualenvs and .env files
# out): every package pyproject.toml's [tool.setuptools.packages.find] lists reaches the image
# with no COPY line of its own to forget (tests/unit/test_dockerfile.py, tests/e2e/test_image.py).
COPY . .
ARG EXTRAS=cpu,onnx,otel
RUN pip install ".[${EXTRAS}]"

# Index versions, uploads and the Ray temp dir; compose mounts one shared volume here.
ENV RAGLINE_DATA_DIR=/data
VOLUME /data
EXPOSE 8000
CMD ["ragline", "serve", "--host", "0.0.0.0", "--port", "8000"]
