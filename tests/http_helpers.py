"""Shared pieces of the HTTP service tests: small trained artifacts, a live service on a store, requests."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import uvicorn
from helpers import REPO_ROOT, cli_env, train_planted

from recbole_fbsm.runtime.distributed import free_port
from recbole_fbsm.serve.http import bound_socket, create_app
from recbole_fbsm.serve.live import LiveState
from recbole_fbsm.serve.store import open_store

TOKEN = "s3cret"  # the bearer token of the tests' services: POST and DELETE send AUTH
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SETTINGS = {
    "FBSM": {"epochs": 2, "rank": 3, "init_std": 0.1},
    "UFSM": {"epochs": 1, "n_functions": 2, "init_std": 0.3, "learning_rate": 0.05},
    "CoSim": {},
    "DropoutNet": {"epochs": 1},
}


def train(root, names):
    """{model name: artifact path} of models trained on a planted dataset under ``root``, and the data."""
    data, results = train_planted(root, {name: SETTINGS[name] for name in names})
    return {name: result["artifact_file"] for name, result in results.items()}, data


@contextlib.contextmanager
def service_in_thread(app, host="127.0.0.1", port=0, timeout=30):
    """Run ``app`` on uvicorn in a background thread; yields the base URL."""
    sock = bound_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the HTTP service did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()


@contextlib.contextmanager
def live_service(artifact, store, token=None, max_body=8 << 20):
    """(base URL, LiveState) of a service in this process on ``store`` (a location)."""
    state = LiveState(str(artifact), open_store(store))
    try:
        with service_in_thread(create_app(state, token=token, max_body=max_body)) as url:
            yield url, state
    finally:
        state.store.close()


def call(url, method="GET", body=None, raw=None, headers=None, timeout=30):
    """(status, JSON answer) of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def healthy(url):
    return call(f"{url}/health")[0] == 200


@contextlib.contextmanager
def cli_service(args, cwd, port, timeout=120):
    """``recbole-fbsm serve http ARGS --port PORT`` in its own process (group); yields (process, URL) once it
    answers."""
    process = subprocess.Popen(
        [sys.executable, "-m", "recbole_fbsm", "serve", "http", *map(str, args), "--port", str(port)],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the service exited: {process.stderr.read()}")
            try:
                if healthy(url):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the service did not answer in time")
            time.sleep(0.2)
        yield process, url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


__all__ = ["REPO_ROOT", "train", "live_service", "call", "healthy", "free_port", "cli_service"]
