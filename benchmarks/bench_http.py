"""Throughput and latency of the live HTTP service (``recbole-fbsm serve http``) on the loopback interface,
and the durability of its store under SIGKILL.

  python benchmarks/bench_http.py MODEL.fbsm [--workers 1 2] [--clients 1 8 32] [--requests 2000] [--seconds 20]
                                             [--kills 20] [--kill-seconds 1800] [--kill-only]

1. **Load**: in this process, the median over ``--repeats`` of loading the artifact and scoring one new item
   for every user, and the service's start: from launching ``recbole-fbsm serve http`` to its first answer.
2. **Mixed load** (for each ``--workers`` count and each ``--clients`` count): the service runs in its own
   process(es) on a fresh SQLite store; ``--new-items`` new items are POSTed (the token rows of the artifact's
   test items, under new ids); then ``clients`` reader threads, each with its own keep-alive connection, send
   ``GET /users/{user}/items?top=10`` (scope all: training and new items) for random users (seeded), while one
   writer thread POSTs likes (``POST /users/{user}/likes``, one like each, committed before the answer) and
   every 20th write a new item, until ``--requests`` reads or ``--seconds`` have passed. Reported: reads/s,
   read p50 and p99, writes/s and write p99, errors.
3. **Kill test**: ``--kills`` times, the service (``--kill-workers`` workers) is started on one store, 4 writer
   threads POST likes from the launch on (a refused connection is retried: no time is spent waiting for the
   start-up beside them), and a random 0.2-1.5 s after its first answer the whole process group gets SIGKILL.
   After the last kill the service starts once more and every like that got a 200 is looked up: the count
   missing must be 0. A round's time is the service's start-up (imports and model load in the supervisor and in
   every worker, about a minute for 2 workers on a loaded 2-core machine), not the writes: ``--kill-seconds``
   bounds the whole test, a round that would not fit in what is left is not started, and the line says how
   many kills were done. ``--kill-only`` skips parts 1 and 2.

Bounded in count and in time (``--requests``, ``--seconds``, ``--kills``, ``--kill-seconds``). Client and server
share the machine: on few cores the client's threads take CPU from the service.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model artifact (.fbsm)")
    parser.add_argument("--new-items", type=int, default=100, help="new items in the catalogue (default: %(default)s)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker processes (default: 1 2)")
    parser.add_argument(
        "--clients", type=int, nargs="+", default=[1, 8, 32], help="concurrent readers (default: 1 8 32)"
    )
    parser.add_argument("--requests", type=int, default=2000, help="reads per row at most (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=20.0, help="time per row at most (default: %(default)s)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats of the in-process load timing (default: %(default)s)"
    )
    parser.add_argument(
        "--kills", type=int, default=20, help="SIGKILLs of the kill test (0: none; default: %(default)s)"
    )
    parser.add_argument(
        "--kill-workers", type=int, default=2, help="workers of the kill test's service (default: %(default)s)"
    )
    parser.add_argument(
        "--kill-seconds",
        type=float,
        default=1800.0,
        help="wall-clock bound of the whole kill test (default: %(default)s)",
    )
    parser.add_argument("--kill-only", action="store_true", help="only the kill test (no load timing, no load table)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker (default: %(default)s)")
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


def percentile(values, q):
    values = sorted(values)
    return 1000 * values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def mixed_load(port, users, items, clients, max_requests, max_seconds, seed):
    """Readers (``clients`` threads) and one writer at once; their latencies and errors."""
    reads, writes, errors, lock = [], [], [0], threading.Lock()
    counter = iter(range(max_requests))
    stop = threading.Event()
    deadline = time.perf_counter() + max_seconds

    def reader(k):
        rng = random.Random(seed * 1000 + k)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        while time.perf_counter() < deadline:
            with lock:
                if next(counter, None) is None:
                    break
            start = time.perf_counter()
            status, _ = request(connection, "GET", f"/users/{rng.choice(users)}/items?top=10")
            mine.append(time.perf_counter() - start)
            if status != 200:
                with lock:
                    errors[0] += 1
        connection.close()
        with lock:
            reads.extend(mine)

    def writer():
        rng = random.Random(seed)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        n = 0
        while not stop.is_set():
            n += 1
            start = time.perf_counter()
            if n % 20 == 0:
                body = {"items": [dict(rng.choice(items), id=f"bench_w{seed}_{n}")]}
                status, _ = request(connection, "POST", "/items", body)
            else:
                status, _ = request(
                    connection, "POST", f"/users/{rng.choice(users)}/likes", {"items": [rng.choice(items)["id"]]}
                )
            writes.append(time.perf_counter() - start)
            if status != 200:
                with lock:
                    errors[0] += 1
        connection.close()

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(clients)]
    write_thread = threading.Thread(target=writer)
    start = time.perf_counter()
    write_thread.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    stop.set()
    write_thread.join()
    return {
        "clients": clients,
        "reads": len(reads),
        "seconds": wall,
        "reads_per_s": len(reads) / wall,
        "read_p50_ms": percentile(reads, 0.50),
        "read_p99_ms": percentile(reads, 0.99),
        "writes_per_s": len(writes) / wall,
        "write_p99_ms": percentile(writes, 0.99),
        "errors": errors[0],
    }


def start_service(model, port, threads, workers=1, store=None, timeout=120):
    """The service in its own process group; (process, seconds to its first answer)."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [
        sys.executable,
        "-m",
        "recbole_fbsm",
        "serve",
        "http",
        model,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ] + (["--store", store] if store else [])
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            if request(connection, "GET", "/health")[0] == 200:
                return process, time.perf_counter() - start
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"the service stopped (exit {process.returncode})") from None
            if time.perf_counter() - start > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                raise RuntimeError("the service did not answer in time") from None
            time.sleep(0.05)


def stop_service(process, sig=signal.SIGTERM):
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    process.wait(60)


def kill_test(model, port, threads, workers, kills, store, liked, seed=0, max_seconds=1800.0):
    """Up to ``kills`` SIGKILLs under write load (likes of the dataset items ``liked``) within ``max_seconds``;
    {"kills", "acknowledged", "missing" after the restart, "seconds", "round_s" (each round's wall time)}."""
    rng = random.Random(seed)
    acknowledged, lock = [], threading.Lock()
    began, rounds = time.perf_counter(), []
    for round_ in range(kills):
        longest = max(rounds, default=0.0)
        # room for this round and for the final start (about one round's start-up), judged by the longest so far
        if rounds and time.perf_counter() - began + 2 * longest > max_seconds:
            break
        round_start = time.perf_counter()
        stop = threading.Event()

        def writer(k, round_, stop):
            n = 0
            connection = None
            while not stop.is_set():
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                user, item = f"kill{round_}_{k}", liked[(n + 1) % len(liked)]
                try:
                    status, _ = request(connection, "POST", f"/users/{user}/likes", {"items": [item]})
                except (OSError, http.client.HTTPException):  # not listening yet, or killed: retry until stopped
                    connection.close()
                    connection = None
                    time.sleep(0.05)
                    continue
                n += 1
                if status == 200:
                    with lock:
                        acknowledged.append((user, item))

        writers = [threading.Thread(target=writer, args=(k, round_, stop)) for k in range(4)]
        for thread in writers:
            thread.start()
        try:
            process, _ = start_service(model, port, threads, workers, store)
        except BaseException:
            stop.set()
            raise
        time.sleep(rng.uniform(0.2, 1.5))
        stop_service(process, signal.SIGKILL)
        stop.set()
        for thread in writers:
            thread.join()
        rounds.append(time.perf_counter() - round_start)
        print(f"  kill {round_ + 1}: {rounds[-1]:.1f} s, {len(acknowledged)} acknowledged so far", flush=True)
    process, _ = start_service(model, port, threads, workers, store)
    missing = 0
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        by_user = {}
        for user, item in acknowledged:
            by_user.setdefault(user, set()).add(item)
        for user, items in by_user.items():
            status, body = request(connection, "GET", f"/users/{user}/likes")
            stored = set(json.loads(body)["likes"]) if status == 200 else set()
            missing += len(items - stored)
    finally:
        stop_service(process)
    return {
        "kills": len(rounds),
        "acknowledged": len(acknowledged),
        "missing": missing,
        "seconds": time.perf_counter() - began,
        "round_s": rounds,
    }


def main(argv=None):
    args = parse_args(argv)
    results = {}
    if args.kill_only:
        served = load_artifact(args.model)
    else:
        served, load_s, score_s = time_load(args.model, args.repeats)
        results.update({"load_s": load_s, "score_one_item_s": score_s})
    print(
        f"artifact {args.model}: {served.model_name}, {served.dataset.user_num - 1} users, "
        f"{len(served.training_items())} training items, {served.features.n_features} features, "
        f"{os.path.getsize(args.model) / 2**20:.1f} MiB"
    )
    folder = tempfile.mkdtemp(prefix="bench-http-")
    try:
        if not args.kill_only:
            print(
                f"load (median of {args.repeats}): {load_s:.3f} s; one new item scored for every user: "
                f"{score_s * 1000:.1f} ms"
            )
            results["rows"] = load_table(args, served, folder)
        if args.kills:
            store = os.path.join(folder, "kill.sqlite")
            liked = served.item_tokens(served.training_items()[:200])
            print(
                f"\nkill test: up to {args.kills} SIGKILLs of {args.kill_workers} worker(s) under write load, "
                f"at most {args.kill_seconds:.0f} s",
                flush=True,
            )
            kill = kill_test(
                args.model,
                args.port,
                args.threads,
                args.kill_workers,
                args.kills,
                store,
                liked,
                max_seconds=args.kill_seconds,
            )
            results["kill_test"] = {"workers": args.kill_workers, **kill}
            bounded = "" if kill["kills"] == args.kills else f" (time bound reached: {kill['kills']} of {args.kills})"
            print(
                f"kill test: {kill['kills']} SIGKILLs of {args.kill_workers} worker(s){bounded}; "
                f"{kill['acknowledged']} acknowledged likes, {kill['missing']} missing after restart; "
                f"{kill['seconds']:.0f} s (rounds: median {statistics.median(kill['round_s'] or [0]):.1f} s)"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def load_artifact(path):
    from recbole_fbsm.serve.loading import load_model

    return load_model(path)


def load_table(args, served, folder):
    """Part 2: one row per (workers, clients), each on a fresh service and store."""
    items = catalogue_items(served, args.new_items)
    users = served.user_tokens(range(1, served.dataset.user_num))
    rows = []
    print("\n| workers | readers | reads | reads/s | read p50 ms | read p99 ms | writes/s | write p99 ms | errors |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workers in args.workers:
        for clients in args.clients:
            store = os.path.join(folder, f"w{workers}c{clients}.sqlite")
            process, start_s = start_service(args.model, args.port, args.threads, workers, store)
            try:
                connection = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
                status, body = request(connection, "POST", "/items", {"items": items})
                assert status == 200, body
                row = {
                    "workers": workers,
                    "start_s": start_s,
                    **mixed_load(args.port, users, items, clients, args.requests, args.seconds, clients),
                }
            finally:
                stop_service(process)
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _line(row):
    return (
        f"| {row['workers']} | {row['clients']} | {row['reads']} | {row['reads_per_s']:.0f} | "
        f"{row['read_p50_ms']:.1f} | {row['read_p99_ms']:.1f} | {row['writes_per_s']:.0f} | "
        f"{row['write_p99_ms']:.1f} | {row['errors']} |"
    )


if __name__ == "__main__":
    main()
