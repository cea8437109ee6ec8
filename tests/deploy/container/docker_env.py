"""The Docker engine for the container test: run commands, find the client, answer or start
`dockerd` (niced; stopped again at the end), and the log/check/skip conventions of the test.

Importing it finds the docker client and skips (exit 77; a failure under CI=true) without one.
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
from kiln_net import stop_process  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
START = time.monotonic()


def log(*a):
    print(f"[{time.monotonic() - START:7.1f}s]", *a, flush=True)


def skip(why):
    if IN_CI:
        print("FAIL (CI=true, so no skip):", why)
        sys.exit(1)
    print("SKIP:", why)
    sys.exit(77)


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    log("ok  ", msg)


# The docker.io package's client: BuildKit through DOCKER_BUILDKIT=1 without buildx.
DOCKER = os.environ.get("DOCKER") or next(
    (p for p in ("/usr/bin/docker", shutil.which("docker")) if p and os.access(p, os.X_OK)), None)
if not DOCKER:
    skip("no docker client (Debian: docker.io; scripts/install-deps.sh installs it)")
ENV = dict(os.environ, DOCKER_BUILDKIT="1", COMPOSE_DOCKER_CLI_BUILD="1", DOCKER=DOCKER)


def sh(cmd, check_rc=True, timeout=600, capture=True, env=None, cwd=None, stdout=None):
    r = subprocess.run(cmd, env=env or ENV, cwd=cwd, timeout=timeout, text=True,
                       stdout=stdout if stdout else (subprocess.PIPE if capture else None),
                       stderr=subprocess.STDOUT if (capture or stdout) else None)
    if check_rc and r.returncode != 0:
        out = (r.stdout or "")[-3000:] if capture and not stdout else ""
        raise Failure(f"{' '.join(cmd)} exited {r.returncode}\n{out}")
    return r


def docker(*args, **kw):
    return sh([DOCKER, *args], **kw)


def docker_answers():
    try:
        return docker("info", check_rc=False, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def start_dockerd(tmp):
    if os.geteuid() != 0:
        skip("no Docker engine answers and starting dockerd needs root")
    dockerd = shutil.which("dockerd")
    if not dockerd:
        skip("no Docker engine answers and there is no dockerd (Debian: docker.io)")
    path = os.path.join(tmp, "dockerd.log")
    logf = open(path, "w")
    # Niced: the image build compiles Kiln on cores other work shares.
    proc = subprocess.Popen(["nice", "-n", "10", dockerd], stdout=logf, stderr=subprocess.STDOUT,
                            start_new_session=True)
    end = time.monotonic() + 90
    while time.monotonic() < end:
        if proc.poll() is not None:
            break
        if docker_answers():
            log(f"started dockerd (pid {proc.pid}); it is stopped at the end")
            return proc
        time.sleep(0.5)
    tail = open(path).read()[-2000:]
    if proc.poll() is None:
        proc.terminate()
    skip(f"dockerd did not start (so Docker cannot run here):\n{tail}")


def stop_dockerd(proc):
    if proc is None or proc.poll() is not None:
        return
    stop_process(proc, 60)
    log("stopped the dockerd this test started")


def wait_for(what, fn, seconds, step=0.2):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    raise Failure(f"timed out after {seconds} s waiting for {what}")
