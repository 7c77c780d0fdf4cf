#!/usr/bin/env bash
# Start a Docker engine for the docker sandbox tests and build the sandbox
# image `rlvr-sandbox:local` without pulling anything.
#
# What it does, each step bounded and allowed to fail:
#   1. installs Debian's docker.io when dockerd is missing (apt-get);
#   2. starts `dockerd --bridge=none --iptables=false` in the background (the
#      default settings would rewrite the host's bridges and iptables), with
#      its log in $RLVR_DOCKER_LOG, and waits up to $RLVR_DOCKER_WAIT_S seconds
#      for `docker info` to answer;
#   3. builds the image by `docker import` of a tarball made from the host's
#      own Python: the interpreter, its stdlib (minus tests/idle/ensurepip) and
#      exactly the shared libraries that `ldd` names for it and for its
#      extension modules. No shell, no package manager: about 40 MB, offline.
#
# It always exits 0. When the engine cannot start it says why on stdout, and
# the docker tests skip with that reason ("no Docker engine answers").
set -u

LOG=${RLVR_DOCKER_LOG:-/tmp/rlvr-dockerd.log}
WAIT_S=${RLVR_DOCKER_WAIT_S:-60}
IMAGE=${RLVR_SANDBOX_IMAGE:-rlvr-sandbox:local}
PY=${RLVR_SANDBOX_PYTHON:-/usr/bin/python3}

say() { echo "ci_docker: $*"; }

if docker info >/dev/null 2>&1; then
    say "an engine already answers"
else
    if ! command -v dockerd >/dev/null 2>&1; then
        say "dockerd missing: apt-get install -y docker.io"
        if ! (apt-get install -y --no-install-recommends docker.io >/tmp/rlvr-apt-docker.log 2>&1 \
              || (apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends docker.io >/tmp/rlvr-apt-docker.log 2>&1)); then
            say "SKIP: could not install docker.io (see /tmp/rlvr-apt-docker.log)"
            exit 0
        fi
    fi
    say "starting dockerd --bridge=none --iptables=false (log: $LOG)"
    nohup dockerd --bridge=none --iptables=false --ip6tables=false >"$LOG" 2>&1 &
    DPID=$!
    up=0
    for _ in $(seq 1 "$WAIT_S"); do
        if docker info >/dev/null 2>&1; then up=1; break; fi
        if ! kill -0 "$DPID" 2>/dev/null; then break; fi
        sleep 1
    done
    if [ "$up" != 1 ]; then
        say "SKIP: dockerd did not answer within ${WAIT_S}s; last log lines:"
        tail -n 15 "$LOG" | sed 's/^/  dockerd| /'
        kill "$DPID" 2>/dev/null
        exit 0
    fi
    say "engine up (pid $DPID)"
fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "image $IMAGE already present"
    exit 0
fi
if [ ! -x "$PY" ]; then
    say "SKIP image: no interpreter at $PY"
    exit 0
fi

ROOT=$(mktemp -d /tmp/rlvr-sandbox-root.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
REAL=$(readlink -f "$PY")
STDLIB=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
DYNLOAD=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("platstdlib") + "/lib-dynload")')
mkdir -p "$ROOT/usr/bin" "$ROOT/work" "$ROOT/tmp" "$ROOT/etc"
cp -a "$REAL" "$ROOT/usr/bin/"
ln -sf "$(basename "$REAL")" "$ROOT/usr/bin/python3"
ln -sf python3 "$ROOT/usr/bin/python"
mkdir -p "$ROOT$STDLIB"
tar -C / --exclude='*/test' --exclude='*/tests' --exclude='*/idlelib' --exclude='*/ensurepip' \
    --exclude='*/tkinter' --exclude='*/turtledemo' --exclude='__pycache__' -cf - "${STDLIB#/}" \
    | tar -C "$ROOT" -xf -
[ -d "$DYNLOAD" ] && mkdir -p "$ROOT$DYNLOAD" && cp -a "$DYNLOAD/." "$ROOT$DYNLOAD/"
# Shared libraries: what ldd names for the interpreter and every extension.
{ ldd "$REAL"; find "$DYNLOAD" -name '*.so' -exec ldd {} \; 2>/dev/null; } \
    | grep -o '/[^ ]*\.so[^ ]*' | sort -u | while read -r lib; do
        [ -e "$lib" ] || continue
        mkdir -p "$ROOT$(dirname "$lib")"
        cp -L "$lib" "$ROOT$lib"
    done
echo "sandbox:x:65534:65534:sandbox:/work:/nonexistent" >"$ROOT/etc/passwd"
echo "sandbox:x:65534:" >"$ROOT/etc/group"
chmod 1777 "$ROOT/tmp" "$ROOT/work"
if tar -C "$ROOT" -cf - . | docker import \
        --change 'WORKDIR /work' --change 'ENV PATH=/usr/bin' \
        --change 'CMD ["/usr/bin/python3"]' - "$IMAGE" >/dev/null; then
    say "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes) from $REAL"
    docker run --rm --network none "$IMAGE" /usr/bin/python3 -c 'print("ci_docker: image runs python", __import__("sys").version.split()[0])' \
        || say "WARNING: the image was built but does not run"
else
    say "SKIP image: docker import failed"
fi
exit 0
