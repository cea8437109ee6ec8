"""Helpers shared by the Python tests and benchmarks that start kilnd or a container: a free
local port, a GET that never raises, and stopping a process they started."""
import signal
import socket
import subprocess
import urllib.error
import urllib.request


def free_port(host="127.0.0.1"):
    """A port nothing listens on now (the OS's pick); `host` "" for every interface."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    """(status, body); (None, "") when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, socket.timeout, OSError):
        return None, ""


def stop_process(proc, timeout):
    """SIGTERM, then SIGKILL if `proc` is still there after `timeout` seconds; waits for it.
    Nothing for a process that has already exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
