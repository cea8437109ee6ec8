# syntax=docker/dockerfile:1
# kilnd, the Kiln inference server (docs/deploy.md).
#
#   docker build -t kiln .                        # CPU image (target `runtime`, the default)
#   docker build --target runtime-cuda -t kiln:cuda .
#   docker run -p 8500:8500 -p 8501:8501 kiln     # serves config/models (the example model)
#
# Stages: `build` (debian:12 + scripts/install-deps.sh in KILN_DEPS=build mode, the CMake/Ninja
# build of CI with tests off) -> `runtime` (debian:12-slim + only the shared libraries kilnd
# loads) and `runtime-cuda` (the same plus the NVIDIA container runtime's environment).
#
# CUDA: the CUDA backend is not built yet (README: next milestones), so `runtime-cuda` serves
# the CPU engine. nvidia/cuda images are Ubuntu-based, and a binary built against Debian 12's
# glibc 2.36 and library sonames does not run there; when the backend lands, set BUILD_IMAGE /
# RUNTIME_IMAGE to matching nvidia/cuda:<ver>-devel / -runtime images (and an Ubuntu
# package list), or add NVIDIA's debian12 CUDA apt repository to these stages.

ARG BUILD_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

# ---- build ---------------------------------------------------------------------------------
FROM ${BUILD_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN KILN_DEPS=build scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# The CI configuration (scripts/test.sh) without the tests.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
      -DKILN_BUILD_TESTS=OFF \
 && cmake --build build --target kilnd kiln \
 && strip build/server/kilnd build/tools/kiln

# ---- runtime (CPU) -------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
# The packages of `ldd build/server/kilnd` (dpkg -S); the same list as KILN_DEPS=runtime in
# scripts/install-deps.sh. curl: the health check.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libabsl20220623 libbrotli1 libc-ares2 libcpp-httplib0.11 libdnnl2 libfmt9 libgomp1 \
      libgrpc++1.51 libgrpc29 libonnx1 libprotobuf32 libre2-9 libspdlog1.10 libssl3 libstdc++6 \
      libyaml-cpp0.7 ocl-icd-libopencl1 zlib1g ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kiln \
 && useradd --system --uid 10001 --gid kiln --home-dir /opt/kiln --shell /usr/sbin/nologin kiln \
 && mkdir -p /opt/kiln /var/cache/kiln && chown kiln:kiln /var/cache/kiln
COPY --from=build /src/build/server/kilnd /usr/local/bin/kilnd
COPY --from=build /src/build/tools/kiln /usr/local/bin/kiln
COPY --chown=kiln:kiln config/ /opt/kiln/config/
# Relative paths in config/server.yaml (model_repository: config/models) resolve here.
WORKDIR /opt/kiln
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001
# How oneDNN's OpenMP threads wait: a ~50 us spin between kernels, then sleep (kilnd's own
# default, spelled out so operators see the knob; see docs/cpu-engine.md).
ENV OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000
# gRPC (server.grpc_address) and HTTP (/healthz, /readyz, /metrics; server.http_address).
EXPOSE 8500 8501
VOLUME ["/opt/kiln/config/models", "/var/cache/kiln"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8501/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/kilnd"]
CMD ["--config", "/opt/kiln/config/server.yaml", "--engine-cache-dir", "/var/cache/kiln"]

# ---- runtime-cuda --------------------------------------------------------------------------
# Serves the CPU engine today (no CUDA backend yet); GPU-ready for the NVIDIA container
# runtime (docker compose --profile gpu, or deploy/kubernetes/deployment-gpu.yaml).
FROM runtime AS runtime-cuda
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# The default target: the CPU image.
FROM runtime
