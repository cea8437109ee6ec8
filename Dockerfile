# kilnd, the Kiln inference server (docs/deploy.md). Needs BuildKit (the default builder of
# Docker 23+; DOCKER_BUILDKIT=1 with Docker 20.10) for the compiler cache mount.
#
#   docker build -t kiln .                              # CPU image (target `runtime`, the default)
#   docker build --target runtime-cuda -t kiln:cuda .   # + the CUDA backend and its libraries
#   docker run -p 8500:8500 -p 8501:8501 kiln           # serves config/models (the example model)
#
# Stages: `build` (debian:12 + scripts/install-deps.sh in KILN_DEPS=build mode, CI's
# CMake/Ninja build with tests off) -> `runtime` (debian:12-slim + only the shared libraries
# kilnd loads). `build-cuda` -> `runtime-cuda`: the same with NVIDIA's CUDA 13 repository for
# Debian 12 (cudart, NVRTC, cuBLASLt, cuDNN 9), for the NVIDIA container runtime. The CUDA
# stages are built only when that target is asked for.

ARG BUILD_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim
# NVIDIA's apt repository for Debian 12 (runtime-cuda only) and the CUDA major.minor it serves.
ARG CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64
ARG CUDA_VERSION=13-0

# ---- build-deps, build -----------------------------------------------------------------------
FROM ${BUILD_IMAGE} AS build-deps
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN KILN_DEPS=build scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*

FROM build-deps AS build
COPY . .
# The CI configuration (scripts/test.sh) without the tests. ccache (found by CMakeLists.txt)
# keeps its objects in a BuildKit cache mount, so a rebuild after a source change compiles
# only what changed; the mount is not part of any image.
RUN --mount=type=cache,id=kiln-ccache,target=/root/.cache/ccache \
    export CCACHE_DIR=/root/.cache/ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=2G \
 && ccache --zero-stats >/dev/null \
 && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
      -DKILN_BUILD_TESTS=OFF -DKILN_WITH_CUDA=OFF \
 && cmake --build build --target kilnd kiln \
 && strip build/server/kilnd build/tools/kiln \
 && { ccache --show-stats | grep -E '^ *(Hits|Misses)' || true; }

# ---- runtime (CPU) -------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
# The packages of `ldd build/server/kilnd` (dpkg -S), and libsentencepiece0 for the tokenizer
# shim kilnd loads beside itself (text in and out of generation); the same list as
# KILN_DEPS=runtime in scripts/install-deps.sh. Nothing else: the health check is a bash
# script, not curl.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libabsl20220623 libbrotli1 libc-ares2 libcpp-httplib0.11 libdnnl2 libfmt9 libgomp1 \
      libgrpc++1.51 libgrpc29 libonnx1 libprometheus-cpp-core1.0 libprotobuf32 libre2-9 \
      libspdlog1.10 libssl3 libstdc++6 libyaml-cpp0.7 ocl-icd-libopencl1 zlib1g libsentencepiece0 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 kiln \
 && useradd --system --uid 10001 --gid kiln --home-dir /opt/kiln --shell /usr/sbin/nologin kiln \
 && mkdir -p /opt/kiln /var/cache/kiln && chown kiln:kiln /var/cache/kiln
COPY deploy/docker/kiln-healthcheck /usr/local/bin/kiln-healthcheck
COPY --from=build /src/build/server/kilnd /usr/local/bin/kilnd
COPY --from=build /src/build/server/libkiln_spm_shim.so /usr/local/bin/libkiln_spm_shim.so
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
# kilnd writes only here (uploads, the engine cache): the root filesystem may be read-only.
VOLUME ["/opt/kiln/config/models", "/var/cache/kiln"]
# Healthy = ready: every model in the repository is READY (compiled and checked). The start
# period covers compiling the models of a cold start.
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["/usr/local/bin/kiln-healthcheck", "http://127.0.0.1:8501/readyz"]
ENTRYPOINT ["/usr/local/bin/kilnd"]
CMD ["--config", "/opt/kiln/config/server.yaml", "--engine-cache-dir", "/var/cache/kiln"]

# ---- build-cuda ----------------------------------------------------------------------------
# The build stage plus the CUDA toolkit parts the backend needs (runtime/cuda/CMakeLists.txt:
# headers, the static runtime, NVRTC, cuBLASLt, cuDNN 9; kernels are compiled by NVRTC at run
# time, nvcc only lets CMake's FindCUDAToolkit find the toolkit).
FROM build-deps AS build-cuda
ARG CUDA_REPO
ARG CUDA_VERSION
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends curl ca-certificates \
 && curl -fsSLo /tmp/cuda-keyring.deb ${CUDA_REPO}/cuda-keyring_1.1-1_all.deb \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends cuda-cudart-dev-${CUDA_VERSION} \
      cuda-nvrtc-dev-${CUDA_VERSION} libcublas-dev-${CUDA_VERSION} cuda-nvcc-${CUDA_VERSION} \
      libcudnn9-dev-cuda-${CUDA_VERSION%%-*} \
 && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,id=kiln-ccache-cuda,target=/root/.cache/ccache \
    export CCACHE_DIR=/root/.cache/ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=2G \
 && cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
      -DKILN_BUILD_TESTS=OFF -DCUDAToolkit_ROOT=/usr/local/cuda-$(echo ${CUDA_VERSION} | tr - .) \
 && grep -q 'KILN_HAVE_CUDA:INTERNAL=ON' build-cuda/CMakeCache.txt \
 && cmake --build build-cuda --target kilnd kiln \
 && strip build-cuda/server/kilnd build-cuda/tools/kiln

# ---- runtime-cuda --------------------------------------------------------------------------
# The runtime image plus the CUDA libraries kilnd opens at run time (libcublasLt.so.13,
# libnvrtc.so.13, libcudnn.so.9); the GPU driver comes from the NVIDIA container runtime
# (docker compose --profile gpu, or deploy/kubernetes/deployment-gpu.yaml).
FROM runtime AS runtime-cuda
ARG CUDA_REPO
ARG CUDA_VERSION
USER root
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends curl ca-certificates \
 && curl -fsSLo /tmp/cuda-keyring.deb ${CUDA_REPO}/cuda-keyring_1.1-1_all.deb \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cuda-nvrtc-${CUDA_VERSION} libcublas-${CUDA_VERSION} libcudnn9-cuda-${CUDA_VERSION%%-*} \
 && apt-get purge -y -qq curl && apt-get autoremove -y -qq \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
COPY --from=build-cuda /src/build-cuda/server/kilnd /usr/local/bin/kilnd
COPY --from=build-cuda /src/build-cuda/tools/kiln /usr/local/bin/kiln
USER 10001
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# The default target: the CPU image.
FROM runtime
