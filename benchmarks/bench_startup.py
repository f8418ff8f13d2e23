"""Start-up of the service: seconds from ``recbole-fbsm serve http ARTIFACT`` to its first ``/health`` 200, against
``python -c "import torch"`` (the floor any torch program pays), started in turns.

    python benchmarks/bench_startup.py saved/FBSM-....fbsm --repeats 2
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request


def health_seconds(artifact, port):
    start = time.perf_counter()
    command = [shutil.which("recbole-fbsm") or "recbole-fbsm", "serve", "http", artifact, "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return time.perf_counter() - start
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"serve http exited with {process.returncode} before answering")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait()


def import_torch_seconds():
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", help="a model artifact (.fbsm)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--port", type=int, default=8700)
    args = parser.parse_args()
    for k in range(args.repeats):
        health, torch_import = health_seconds(args.artifact, args.port + k), import_torch_seconds()
        print(f"/health after {health:.2f} s, import torch {torch_import:.2f} s: {health / torch_import:.2f} x")


if __name__ == "__main__":
    main()
