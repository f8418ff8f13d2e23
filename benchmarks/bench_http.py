"""Throughput and latency of the HTTP service (``recbole-fbsm serve http``) on the loopback interface.

  python benchmarks/bench_http.py MODEL.fbsm [--new-items 100] [--clients 1 8 32] [--requests 2000] [--seconds 30]

1. **Load**: in this process, the median over ``--repeats`` of loading the artifact and scoring one new item
   for every user (what a fresh worker does before its first answer), and the service's start: from
   launching ``recbole-fbsm serve http`` to its first ``/health`` answer (Python and torch imports included).
2. **Load test**: the service runs in its own process; ``--new-items`` new items are POSTed (the token rows
   of the artifact's test items, under new ids); then for each client count, that many threads, each with
   its own keep-alive connection, send ``GET /users/{user}/items?top=10`` for random users (seeded) until
   ``--requests`` answers or ``--seconds`` have passed. Reported: requests/s, p50 and p99 latency, errors.
   One row more: ``GET /items/{item}/users?top=10`` (every user scored for one item) at 8 clients.

Client and server share the machine: on few cores the client's threads take CPU from the service.
"""

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model artifact (.fbsm)")
    parser.add_argument("--new-items", type=int, default=100, help="new items in the catalogue (default: %(default)s)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32], help="concurrent clients (default: 1 8 32)")
    parser.add_argument("--requests", type=int, default=2000, help="answers per client count at most (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=30.0, help="time per client count at most (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the in-process load timing (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the service (default: torch's)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------- load
def catalogue_items(served, count):
    """Request items made of the token rows of the artifact's test items, under new ids."""
    items = served.split_items("test")[:count]
    names = served.features.names
    rows = served.features.matrix[items]
    result = []
    for k, item in enumerate(items):
        row = rows[k]
        tokens = {}
        for column in row.indices:
            field, _, token = names[column].partition(":")
            tokens.setdefault(field, []).append(token)
        result.append({"id": f"bench_new_{served.item_tokens([item])[0]}", "tokens": tokens})
    return result


def time_load(path, repeats):
    """Median seconds to load the artifact and to score one new item for every user, in this process."""
    from recbole_fbsm.serve import load_model
    from recbole_fbsm.serve.new_items import new_items_from_cells
    from recbole_fbsm.serve.recommend import recommend

    loads, scores = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        served = load_model(path)
        loaded = time.perf_counter()
        item = catalogue_items(served, 1)[0]
        cells = {name: [" ".join(item["tokens"].get(name, []))] for name in served.fields}
        new = new_items_from_cells(served, [item["id"]], cells, raw=False, source="benchmark", warn=False)
        recommend(served, new, top=10, for_users=False)
        loads.append(loaded - start)
        scores.append(time.perf_counter() - loaded)
    return served, statistics.median(loads), statistics.median(scores)


# ------------------------------------------------------------------------------------------ clients
def request(connection, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    payload = answer.read()
    return answer.status, payload


def load_test(port, paths, clients, max_requests, max_seconds):
    """(requests/s, p50 ms, p99 ms, answers, errors) of ``clients`` threads cycling through ``paths``."""
    latencies, errors, lock = [], [0], threading.Lock()
    counter = iter(range(max_requests))
    deadline = time.perf_counter() + max_seconds

    def client(seed):
        rng = random.Random(seed)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        while time.perf_counter() < deadline:
            with lock:
                if next(counter, None) is None:
                    break
            start = time.perf_counter()
            status, _ = request(connection, "GET", rng.choice(paths))
            mine.append(time.perf_counter() - start)
            if status != 200:
                with lock:
                    errors[0] += 1
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    latencies.sort()
    p = lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return {"clients": clients, "answers": len(latencies), "seconds": wall, "requests_per_s": len(latencies) / wall,
            "p50_ms": p(0.50), "p99_ms": p(0.99), "errors": errors[0]}


def start_service(model, port, threads):
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [sys.executable, "-m", "recbole_fbsm", "serve", "http", model, "--port", str(port)]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            if request(connection, "GET", "/health")[0] == 200:
                return process, time.perf_counter() - start
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"the service stopped: {process.stderr.read()[-2000:]}") from None
            time.sleep(0.05)


def main(argv=None):
    args = parse_args(argv)
    served, load_s, score_s = time_load(args.model, args.repeats)
    print(f"artifact {args.model}: {served.model_name}, {served.dataset.user_num - 1} users, "
          f"{served.features.n_features} features, {os.path.getsize(args.model) / 2**20:.1f} MiB")
    print(f"load (median of {args.repeats}): {load_s:.3f} s; one new item scored for every user: {score_s * 1000:.1f} ms; "
          f"together {load_s + score_s:.3f} s")
    process, start_s = start_service(args.model, args.port, args.threads)
    rows = []
    try:
        connection = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
        status, body = request(connection, "POST", "/items", {"items": catalogue_items(served, args.new_items)})
        assert status == 200, body
        total = json.loads(body)["total"]
        users = served.user_tokens(range(1, served.dataset.user_num))
        user_paths = [f"/users/{user}/items?top=10" for user in users]
        print(f"service start to first answer: {start_s:.2f} s; catalogue: {total} new items\n")
        print("| request | clients | answers | requests/s | p50 ms | p99 ms | errors |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for clients in args.clients:
            row = {"request": "GET /users/{user}/items?top=10",
                   **load_test(args.port, user_paths, clients, args.requests, args.seconds)}
            rows.append(row)
            print(_line(row))
        item_paths = [f"/items/{item['id']}/users?top=10" for item in catalogue_items(served, args.new_items)]
        row = {"request": "GET /items/{item}/users?top=10", **load_test(args.port, item_paths, 8, args.requests // 4,
                                                                         args.seconds)}
        rows.append(row)
        print(_line(row))
    finally:
        process.terminate()
        process.wait(30)
    if args.json:
        Path(args.json).write_text(json.dumps({"load_s": load_s, "score_one_item_s": score_s, "start_s": start_s,
                                               "rows": rows}, indent=1))


def _line(row):
    return (f"| `{row['request']}` | {row['clients']} | {row['answers']} | {row['requests_per_s']:.0f} | "
            f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['errors']} |")


if __name__ == "__main__":
    main()
