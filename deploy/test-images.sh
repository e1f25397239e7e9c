#!/usr/bin/env bash
# Builds the container images and runs the compose stack with podman, checked as a user would
# (`make image-test`; guide: docs/deployment.md, "What was verified, and how").
#
#   deploy/test-images.sh              everything, then removes all it started and built
#   KEEP_IMAGES=1 deploy/test-images.sh    keeps the images (a rerun skips debootstrap and build)
#
# For a Debian bookworm machine, as root, that reaches Debian's mirror and PyPI but no container
# registry and not the PyTorch index:
#  1. installs podman, runc, debootstrap and the containers.conf settings this sandbox needs;
#  2. makes the base image: debootstrap bookworm (python3 3.11, python3-venv) + podman import, and
#     a Redis image on it (Debian's redis-server), in place of python:3.11-slim and redis:7-alpine;
#  3. builds the Dockerfile's cpu target with the local torch wheel (build context torch-wheels);
#  4. starts docker-compose.yml with podman-compose, checks that the image builds the native
#     linear kernel, and checks the stack with deploy/check_stack.py:
#     an answer from the worker through the gateway, a repeated question is an exact hit, SIGTERM
#     stops both services cleanly (exit 0), the answer survives down / up (the data volume), and
#     the redis profile's two replicas share one cache.
# Prints image sizes and the cold start time (up until both services are healthy).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
COMPOSE=(.venv/bin/podman-compose --project-name cachegate)
WORK=${IMAGE_TEST_DIR:-/var/tmp/cachegate-image-test}
BASE_IMAGE=localhost/cachegate-base:bookworm
REDIS_IMAGE=localhost/cachegate-redis:bookworm
IMAGE=localhost/cachegate:cpu   # docker-compose.yml's cachegate:cpu, as podman names it
TORCH=torch==$(sed -n 's/^torch==//p' constraints.txt)
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}   # the host's trust, for pip
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
export REDIS_IMAGE

main() {
  trap cleanup EXIT
  mkdir -p "$WORK"
  step "1/5 podman"; install_podman
  step "2/5 base images"; make_base_image; make_redis_image
  step "3/5 build the cpu target"; build_image
  cleanup_stack
  step "4/5 docker-compose.yml"; check_default_stack
  step "5/5 docker-compose.yml --profile redis"; check_redis_profile
  step "image sizes"
  podman image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E 'cachegate' | sort
  echo "cold start (up -d until worker and gateway are healthy): ${COLD_START}s"
  echo "PASSED"
}

# ---- 1. podman ------------------------------------------------------------------------------

install_podman() {
  local need=()
  for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
  if ((${#need[@]})); then
    apt-get install -y -q "${need[@]}" || { apt-get update -q && apt-get install -y -q "${need[@]}"; }
  fi
  # NOTE: the sandbox forbids raising resource limits (podman's default nofile/nproc) and mixes
  # cgroup versions without systemd: runc with cgroupfs works, crun with systemd does not.
  if ! grep -qs 'cgroup_manager *= *"cgroupfs"' /etc/containers/containers.conf; then
    [[ ! -s /etc/containers/containers.conf ]] || {
      echo "/etc/containers/containers.conf exists without cgroup_manager = \"cgroupfs\"" >&2
      echo "add the settings in deploy/test-images.sh by hand" >&2
      exit 1
    }
    mkdir -p /etc/containers
    cat >/etc/containers/containers.conf <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
  fi
  podman --version
  "${COMPOSE[@]}" version | head -1
}

# ---- 2. base images -------------------------------------------------------------------------

make_base_image() {
  if podman image exists "$BASE_IMAGE"; then echo "$BASE_IMAGE exists"; return; fi
  local mirror rootfs=$WORK/rootfs
  mirror=${DEBIAN_MIRROR:-$(debian_mirror)}
  echo "debootstrap bookworm from $mirror"
  rm -rf "$rootfs" && mkdir -p "$WORK"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log"; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import --change 'ENV=LANG=C.UTF-8' \
    --change 'CMD=["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
}

# The first Debian mirror in this machine's apt sources (one-line or deb822 format).
debian_mirror() {
  local sources
  sources=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list.d/*.sources 2>/dev/null || true)   # (some of these do not exist)
  grep -v '^ *#' <<<"$sources" | grep -oE -m1 'https?://[^ ]+/debian/?( |$)' | tr -d ' '
}

make_redis_image() {
  if podman image exists "$REDIS_IMAGE"; then echo "$REDIS_IMAGE exists"; return; fi
  # Debian's redis-server from the mirror debootstrap used (apt over http: no CA needed).
  podman build -q --format docker -t "$REDIS_IMAGE" --build-arg BASE="$BASE_IMAGE" -f - . <<'EOF'
ARG BASE
FROM ${BASE}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
EOF
}

# ---- 3. the cpu image -----------------------------------------------------------------------

build_image() {
  if [[ -n ${KEEP_IMAGES:-} ]] && podman image exists "$IMAGE"; then
    echo "$IMAGE exists (KEEP_IMAGES)"; return
  fi
  # pip finds the CPU wheel where `pip install torch==…` on this machine finds it (PIP_FIND_LINKS
  # or pip.conf); torch's dependencies and the rest come from PyPI inside the build.
  rm -rf "$WORK/wheels" && mkdir -p "$WORK/wheels"
  "$PY" -m pip download -q --no-deps "$TORCH" -d "$WORK/wheels" 2>&1 | grep -v '^WARNING' || true
  ls "$WORK"/wheels/torch-*+cpu-*.whl
  local start=$SECONDS
  # docker format: OCI images cannot carry the Dockerfile's HEALTHCHECK (podman drops it).
  podman build --format docker --target cpu -t "$IMAGE" \
    --build-arg PYTHON_IMAGE="$BASE_IMAGE" \
    --build-arg TORCH_CPU_INDEX=https://pypi.org/simple \
    --build-context torch-wheels="$WORK/wheels" \
    --secret id=pip-ca,src="$CA_BUNDLE" \
    . >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
  echo "built $IMAGE in $((SECONDS - start))s"
  rm -rf "$WORK/wheels"
}

# ---- 4. the default stack -------------------------------------------------------------------

check_default_stack() {
  local start=$SECONDS
  "${COMPOSE[@]}" up -d >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; exit 1; }
  wait_healthy worker gateway
  COLD_START=$((SECONDS - start))
  echo "healthy after ${COLD_START}s"
  # the image's gcc builds the local model's native linear kernel (localmodel/linear.c)
  podman exec "$(container worker)" python -c "
from localmodel import kernel
assert kernel.library() is not None, 'the native linear kernel was not built in the image'
print('  the native linear kernel builds in the image')" || fail "no native kernel in the image"
  local before after
  before=$(worker_requests)
  "$PY" deploy/check_stack.py ask http://127.0.0.1:8080/v1 "$WORK/answer.json"
  after=$(worker_requests)
  echo "  the worker served $((after - before)) of the 2 requests (the hit never reached it)"
  [[ $((after - before)) == 1 ]] || fail "the worker counted $((after - before)) requests, not 1"

  check_graceful_stop worker gateway
  "${COMPOSE[@]}" down >>"$WORK/up.log" 2>&1
  podman volume exists cachegate_gateway-data || fail "down removed the data volume"
  "${COMPOSE[@]}" up -d >>"$WORK/up.log" 2>&1
  wait_healthy worker gateway
  "$PY" deploy/check_stack.py again http://127.0.0.1:8080/v1 "$WORK/answer.json"
  "${COMPOSE[@]}" down >>"$WORK/up.log" 2>&1
}

# Chat requests the worker answered (its own Prometheus counter, read inside its container).
worker_requests() {
  podman exec "$(container worker)" python -c "
import urllib.request
text = urllib.request.urlopen('http://127.0.0.1:8081/metrics', timeout=5).read().decode()
print(int(sum(float(l.rsplit(' ', 1)[1]) for l in text.splitlines()
              if l.startswith('cachegate_requests_total{') and 'chat' in l)))"
}

# SIGTERM (podman stop, through the init process) must end each service by itself, well inside
# stop_grace_period (15 s), not by the SIGKILL after it (exit 137). NOTE: uvicorn re-raises the
# signal once it has shut down, so a clean stop exits 143 (128 + SIGTERM), after its log says so.
check_graceful_stop() {
  local service id start code
  for service in "$@"; do
    id=$(container "$service")
    start=$SECONDS
    podman stop -t 15 "$id" >/dev/null 2>&1
    code=$(podman inspect --format '{{.State.ExitCode}}' "$id")
    echo "  $service stopped by SIGTERM in $((SECONDS - start))s, exit code $code"
    [[ $(podman logs "$id" 2>&1) == *"Application shutdown complete"* && $code =~ ^(0|143)$ ]] \
      || { podman logs --tail 20 "$id"; fail "$service did not shut down cleanly ($code)"; }
  done
}

# ---- 5. the redis profile -------------------------------------------------------------------

check_redis_profile() {
  "${COMPOSE[@]}" --profile redis up -d >>"$WORK/up.log" 2>&1 \
    || { tail -20 "$WORK/up.log"; exit 1; }
  wait_healthy redis worker gateway-replica
  local replicas id
  replicas=$(podman ps -q --filter label=com.docker.compose.service=gateway-replica | wc -l)
  echo "  $replicas gateway-replica containers"
  [[ $replicas == 2 ]] || fail "expected 2 gateway replicas, found $replicas"
  # Each replica's free host port, as `docker compose port --index N gateway-replica 8080` says.
  local urls=()
  for id in $(container gateway-replica); do
    urls+=("http://$(podman port "$id" 8080/tcp | head -1 | sed 's/^0\.0\.0\.0/127.0.0.1/')/v1")
  done
  "$PY" deploy/check_stack.py shared "${urls[@]}"
  "${COMPOSE[@]}" --profile redis down -v >>"$WORK/up.log" 2>&1
}

# ---- helpers --------------------------------------------------------------------------------

# Container ids of a compose service (every replica).
container() {
  podman ps -a -q --filter label=io.podman.compose.project=cachegate \
    --filter "label=com.docker.compose.service=$1"
}

# NOTE: podman 4.3 runs healthchecks from systemd timers, and there is no systemd here, so
# nothing runs them by itself (and podman-compose < podman 4.6 skips depends_on conditions):
# this runs each service's own healthcheck command until it passes.
wait_healthy() {
  local service id deadline=$((SECONDS + HEALTH_TIMEOUT))
  for service in "$@"; do
    for id in $(container "$service"); do
      until podman healthcheck run "$id" >/dev/null 2>&1; do
        if ((SECONDS > deadline)); then
          podman logs --tail 30 "$id"; fail "$service not healthy after ${HEALTH_TIMEOUT}s"
        fi
        [[ $(podman inspect --format '{{.State.Running}}' "$id") == true ]] \
          || { podman logs --tail 30 "$id"; fail "$service exited"; }
        sleep 2
      done
    done
  done
}

cleanup_stack() {
  "${COMPOSE[@]}" --profile redis down -v >/dev/null 2>&1 || true
}

cleanup() {
  local rc=$?
  step "cleanup"
  cleanup_stack
  podman volume rm -f cachegate_gateway-data cachegate_redis-data >/dev/null 2>&1 || true
  if [[ -z ${KEEP_IMAGES:-} ]]; then
    podman rmi -f "$IMAGE" "$REDIS_IMAGE" "$BASE_IMAGE" >/dev/null 2>&1 || true
    podman image prune -f >/dev/null 2>&1 || true
    rm -rf "$WORK"
  fi
  podman ps -a --filter label=io.podman.compose.project=cachegate --format '{{.Names}}' \
    | grep . && echo "containers left over" >&2
  exit "$rc"
}

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

main "$@"
