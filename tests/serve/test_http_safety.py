"""The HTTP cases of issue 33's 48 (crash, security, tracebacks, silently wrong ids): each gets its clear
answer, and the service is still healthy after it."""

import http.client
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import cli_env
from http_helpers import AUTH, TOKEN, call, cli_service, free_port, healthy, live_service, train


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    artifacts, data = train(root, ["FBSM"])
    return {"path": artifacts["FBSM"], "data": data, "root": root}


@pytest.fixture
def service(artifact, tmp_path):
    with live_service(artifact["path"], str(tmp_path / "s.sqlite"), max_body=4096) as (url, state):
        yield url, state


def item(item_id, words=("t0",)):
    return {"id": item_id, "tokens": {"words": list(words)}}


def raw_request(url, method, path, body=b"", headers=None):
    """(status, parsed JSON) with full control of headers and body (urllib adds its own)."""
    import json

    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(method, path, body=body, headers=headers or {})
    answer = connection.getresponse()
    payload = answer.read()
    connection.close()
    return answer.status, json.loads(payload)


@pytest.mark.parametrize(
    "bad_id, rule",
    [
        ("\ud800", "lone surrogate"),
        (True, "booleans and numbers are not ids"),
        (50, "booleans and numbers are not ids"),
        (1.5, "booleans and numbers are not ids"),
        ("a/b", "'/'"),
        (" sp ", "white space"),
        (" 50", "white space"),
        ("50 ", "white space"),
        ("nul\x00id", "NUL"),
        ("new\nline", "control characters"),
        ("tab\tid", "control characters"),
        ("", "cannot be empty"),
        ("x" * 257, "at most 256 characters"),
        (None, "expected a string"),
    ],
)
def test_bad_item_ids_are_refused_naming_the_rule(service, bad_id, rule):
    url, _ = service
    code, answer = call(f"{url}/items", "POST", {"items": [item(bad_id)]})
    assert code == 400 and rule in answer["error"]
    assert call(f"{url}/items")[1]["items"] == [] and healthy(url)
    code, answer = call(f"{url}/users/u0_0/likes", "POST", {"items": [bad_id]})
    assert code == 400 and rule in answer["error"]


def test_a_surrogate_in_a_path_or_text_never_breaks_listing(service):
    url, _ = service
    code, answer = raw_request(url, "GET", "/users/%ED%A0%80/items")
    assert code in (400, 404) and healthy(url)
    code, answer = call(f"{url}/items", "POST", {"items": [{"id": "ok", "text": {"words": "bad \ud800 text"}}]})
    assert code == 400 and "surrogate" in answer["error"]
    assert call(f"{url}/items")[0] == 200


def test_an_id_the_catalogue_holds_can_be_served_and_deleted(service):
    url, _ = service
    odd = "é 日本 'q'\"?#%&"
    from urllib.parse import quote

    assert call(f"{url}/items", "POST", {"items": [item(odd)]})[0] == 200
    assert odd in call(f"{url}/items")[1]["items"]
    assert call(f"{url}/items/{quote(odd, safe='')}/users?top=2")[0] == 200
    assert call(f"{url}/users/u0_0/likes", "POST", {"items": [odd]})[0] == 200
    assert call(f"{url}/users/u0_0/likes/{quote(odd, safe='')}", "DELETE")[0] == 200
    assert call(f"{url}/items/{quote(odd, safe='')}", "DELETE")[0] == 200
    assert call(f"{url}/items")[1]["items"] == []


def test_the_same_id_as_text_and_as_tokens_in_one_request_is_refused(service):
    url, _ = service
    code, answer = call(f"{url}/items", "POST", {"items": [{"id": "twice", "text": {"words": "t0"}}, item("twice")]})
    assert code == 400 and "more than once" in answer["error"]
    assert call(f"{url}/items")[1]["items"] == []


def test_a_dataset_item_id_with_spaces_never_passes_as_new(service):
    url, _ = service
    for bad in (" k0i00", "k0i00 "):
        assert call(f"{url}/items", "POST", {"items": [item(bad)]})[0] == 400
    code, answer = call(f"{url}/items", "POST", {"items": [item("k0i00")]})
    assert code == 400 and "already belong to items" in answer["error"]


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
)
def test_only_json_is_accepted(service, content_type):
    url, _ = service
    headers = {} if content_type is None else {"Content-Type": content_type}
    code, answer = raw_request(url, "POST", "/items", b'{"items": [{"id": "n", "tokens": {"words": ["t0"]}}]}', headers)
    assert code == 415 and "application/json" in answer["error"]
    assert call(f"{url}/items")[1]["items"] == [] and healthy(url)


def test_bodies_over_the_limit_are_413_declared_or_streamed(service):
    url, _ = service
    big = b'{"items": [' + b" " * 5000 + b"]}"
    code, answer = raw_request(url, "POST", "/items", big, {"Content-Type": "application/json"})
    assert code == 413 and "4096" in answer["error"]
    # chunked: no Content-Length, counted while it arrives
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(
        "POST",
        "/items",
        body=iter([b"[" + b" " * 3000, b" " * 3000 + b"]"]),
        headers={"Content-Type": "application/json"},
        encode_chunked=True,
    )
    assert connection.getresponse().status == 413
    connection.close()
    assert healthy(url)


def test_deep_nesting_is_400(artifact, tmp_path):
    with live_service(artifact["path"], str(tmp_path / "s.sqlite")) as (url, _):
        code, answer = call(f"{url}/items", "POST", raw=b"[" * 100_000 + b"]" * 100_000)
        assert code == 400 and "nests too deeply" in answer["error"]
        assert healthy(url)


def test_a_client_that_disconnects_mid_upload_is_one_log_line(service, caplog):
    url, _ = service
    host, port = url.removeprefix("http://").split(":")
    with caplog.at_level(logging.INFO, logger="recbole_fbsm.serve.http"):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            b"POST /items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3000\r\n\r\n"
            + b"[" * 100
        )
        time.sleep(0.2)
        sock.close()
        time.sleep(0.5)
        assert healthy(url)
    lines = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert not [r for r in caplog.records if r.exc_info]


def test_a_500_names_an_id_and_never_the_exception(service, monkeypatch, caplog):
    url, _ = service
    from recbole_fbsm.serve import http as service_module

    def broken(*args, **kwargs):
        raise RuntimeError("secret internals at /home/someone")

    monkeypatch.setattr(service_module, "top_items", broken)
    with caplog.at_level(logging.INFO, logger="recbole_fbsm.serve.http"):
        code, answer = call(f"{url}/users/u0_0/items")
    assert code == 500 and "internal error" in answer["error"] and "secret" not in answer["error"]
    incident = answer["error"].split("id ")[1].split(":")[0]
    logged = [r for r in caplog.records if incident in r.getMessage()]
    assert logged and "secret internals" in str(logged[0].exc_info[1])
    monkeypatch.undo()
    assert healthy(url) and call(f"{url}/users/u0_0/items")[0] == 200


def test_a_nan_model_answers_null_scores_not_500(artifact, tmp_path):
    with live_service(artifact["path"], str(tmp_path / "s.sqlite")) as (url, state):
        view = state.current().view
        view.shared_weights[:5] = np.nan
        if view.factors is not None:
            view.factors[:5] = np.nan
        code, answer = call(f"{url}/users/u0_0/items?top=5")
        assert code == 200 and all(e["score"] is None or np.isfinite(e["score"]) for e in answer["items"])
        assert healthy(url)


def test_model_document_shows_no_absolute_path(service):
    url, _ = service
    document = call(f"{url}/model")[1]
    assert "/" not in document["file"] and document["file"].endswith(".fbsm")
    assert "/" not in str(call(f"{url}/health")[1]["store"])


def test_one_access_line_per_request(service, caplog):
    url, _ = service
    with caplog.at_level(logging.INFO, logger="recbole_fbsm.serve.http"):
        call(f"{url}/health")
        call(f"{url}/nowhere")
        time.sleep(0.1)
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("GET /health 200 ") and line.endswith(" ms") for line in lines)
    assert any(line.startswith("GET /nowhere 404 ") for line in lines)


def test_mutations_need_the_token_when_one_is_set(artifact, tmp_path):
    with live_service(artifact["path"], str(tmp_path / "s.sqlite"), token=TOKEN) as (url, _):
        for method, path, body in (
            ("POST", "/items", {"items": [item("n1")]}),
            ("POST", "/users/u/likes", {"items": ["k0i00"]}),
            ("DELETE", "/items/n1", None),
            ("DELETE", "/users/u/likes/k0i00", None),
            ("POST", "/admin/reload", None),
        ):
            assert call(url + path, method, body)[0] == 401
            assert call(url + path, method, body, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert call(f"{url}/items", "POST", {"items": [item("n1")]}, headers=AUTH)[0] == 200
        assert call(f"{url}/items")[0] == 200  # reads need none


def test_listening_beyond_loopback_without_a_token_is_refused_in_one_line(artifact, tmp_path):
    env = cli_env()
    env.pop("RECBOLE_FBSM_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm", "serve", "http", str(artifact["path"]), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "without a token" in done.stderr


def test_startup_warnings_print_at_startup_and_shutdown_is_logged(artifact, tmp_path):
    data = artifact["data"]
    new = tmp_path / "new.item"
    token = data["held_out"][0]
    new.write_text(
        "item_id:token\tgenre:token\twords:token_seq\n"
        f"{token}\t{data['features'][token]['genre']}\tnever_seen_word t0\n"
    )
    port = free_port()
    with cli_service([artifact["path"], "--new-items", new, "--store", tmp_path / "s.sqlite"], tmp_path, port) as (
        process,
        url,
    ):
        assert call(f"{url}/items")[1]["items"] == [token]
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        err = process.stderr.read()
    assert "warning:" in err and "never_seen_word" in err
    assert err.index("never_seen_word") < err.index("serving")  # before it serves, not at exit
    assert "stopped (pid" in err.strip().splitlines()[-1] and "Traceback" not in err


def test_a_double_ctrl_c_during_a_request_is_no_traceback(artifact, tmp_path):
    port = free_port()
    with cli_service([artifact["path"], "--store", tmp_path / "s.sqlite"], tmp_path, port) as (process, url):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            b"POST /items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n["
        )
        time.sleep(0.3)  # a request in flight, waiting for its body
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        sock.close()
        err = process.stderr.read()
    assert "Traceback" not in err


def test_a_store_deleted_while_serving_is_noticed_and_no_write_is_acknowledged(artifact, tmp_path):
    store = tmp_path / "s.sqlite"
    with live_service(artifact["path"], str(store)) as (url, _):
        assert call(f"{url}/users/u0_0/likes", "POST", {"items": ["k1i00"]})[0] == 200
        store.unlink()
        code, answer = call(f"{url}/users/u0_0/likes", "POST", {"items": ["k1i01"]})
        assert code == 503 and "deleted or replaced" in answer["error"]
        code, answer = call(f"{url}/health")
        assert code == 503 and "deleted or replaced" in answer["error"]
        assert call(f"{url}/items", "POST", {"items": [item("n1")]})[0] == 503


def test_a_malformed_items_row_in_the_store_never_stops_the_service_nor_export(artifact, tmp_path, capsys):
    from test_store import write_bad_rows

    from recbole_fbsm.cli.serve import serve as serve_main

    store = tmp_path / "s.sqlite"
    write_bad_rows(store)  # one good item ("good", words "a b") and four bad rows
    with live_service(artifact["path"], str(store)) as (url, _):
        assert call(f"{url}/items")[1]["items"] == ["good"] and healthy(url)
        assert call(f"{url}/users/u0_0/items?top=3")[0] == 200
        assert call(f"{url}/users/u0_0/likes", "POST", {"items": ["good"]})[0] == 200
        assert call(f"{url}/users/u0_0/likes")[1]["likes"] == ["good"]
        assert call(f"{url}/items/good/users?top=3")[0] == 200
    out = tmp_path / "out"
    assert serve_main(["export-likes", str(store), "--model", str(artifact["path"]), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: store s.sqlite: table items, row 'bad1'" in err and "Traceback" not in err
    assert [line.split("\t")[0] for line in (out / "out.item").read_text().splitlines()[1:]] == ["good"]


def moved_checkpoint(artifact, folder):
    """A copy of the artifact's training checkpoint whose dataset is no longer where training read it."""
    from recbole_fbsm.storage.safe_files import load_tensors, save_tensors

    _, state = load_tensors(str(artifact["path"]).removesuffix(".fbsm") + ".pth", "checkpoint")
    state["config"]["data_path"] = str(folder / "nowhere" / artifact["data"]["name"])
    save_tensors(state, folder / "moved.pth")
    return folder / "moved.pth"


def test_workers_read_a_checkpoint_with_its_data_path_and_survive_a_sighup_with_a_broken_file(artifact, tmp_path):
    checkpoint = moved_checkpoint(artifact, tmp_path)
    arguments = [checkpoint, "--data-path", artifact["root"], "--workers", 2, "--store", tmp_path / "s.sqlite"]
    with cli_service(arguments, tmp_path, free_port(), timeout=180) as (process, url):
        pids, deadline = set(), time.monotonic() + 120
        while len(pids) < 2:  # both workers answer: neither died for want of the data path
            assert time.monotonic() < deadline and process.poll() is None, pids
            pids.add(call(f"{url}/health")[1]["pid"])
        checkpoint.write_bytes(checkpoint.read_bytes()[:1000])  # a copy cut short
        process.send_signal(signal.SIGHUP)
        err, deadline = b"", time.monotonic() + 120
        os.set_blocking(process.stderr.fileno(), False)
        while b"worker cannot start" not in err:  # the replacement worker's line
            assert time.monotonic() < deadline, err
            assert call(f"{url}/health")[1]["pid"] in pids  # the old workers go on serving
            time.sleep(0.5)
            err += os.read(process.stderr.fileno(), 1 << 20) if select.select([process.stderr], [], [], 0)[0] else b""
        time.sleep(2)  # the supervisor sees the replacement gone
        assert call(f"{url}/health")[1]["pid"] in pids
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        os.set_blocking(process.stderr.fileno(), True)
        err = (err + os.read(process.stderr.fileno(), 1 << 20)).decode()
    assert "Traceback" not in err and err.count("worker cannot start: model file") == 1, err


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_reload_from_a_cross_site_form_is_refused(service, content_type, caplog):
    url, _ = service
    headers = {} if content_type is None else {"Content-Type": content_type}
    with caplog.at_level(logging.WARNING, logger="recbole_fbsm.serve.http"):
        code, answer = raw_request(url, "POST", "/admin/reload", b"x=1", headers)
    assert code == 415 and "application/json" in answer["error"]
    assert not [r for r in caplog.records if "reloaded" in r.getMessage()]
    assert raw_request(url, "POST", "/admin/reload", b"", {"Content-Type": "application/json"})[0] == 200


def test_a_like_racing_the_delete_of_its_item_is_not_stored(service, monkeypatch):
    url, state = service
    assert call(f"{url}/items", "POST", {"items": [item("n1")]})[0] == 200
    stale = state.current()  # the snapshot a like checked, just before another request deleted the item
    assert call(f"{url}/items/n1", "DELETE")[0] == 200
    monkeypatch.setattr(state, "current", lambda: stale)
    code, answer = call(f"{url}/users/u0_0/likes", "POST", {"items": ["n1", "k1i00"]})
    assert code == 404 and "n1" in answer["error"]
    assert state.store.likes("u0_0") == []


def test_a_token_with_a_non_ascii_character_or_a_trailing_space_matches(artifact, tmp_path):
    """The header's bytes are compared with the token's UTF-8 bytes, both without surrounding white space."""
    with live_service(artifact["path"], str(tmp_path / "s.sqlite"), token="s3crét ") as (url, _):
        body = b'{"items": ["k1i00"]}'
        for sent in ("Bearer s3crét".encode(), "Bearer s3crét ".encode(), "Bearer  s3crét".encode()):
            headers = {"Content-Type": "application/json", "Authorization": sent}
            assert raw_request(url, "POST", "/users/u0_0/likes", body, headers)[0] == 200, sent
        for wrong in (b"Bearer s3cr\xe9t", b"Bearer s3cr", b"Bearer"):
            headers = {"Content-Type": "application/json", "Authorization": wrong}
            assert raw_request(url, "POST", "/users/u0_0/likes", body, headers)[0] == 401, wrong


def test_a_blank_token_is_refused_at_start():
    from recbole_fbsm.errors import ColdStartError
    from recbole_fbsm.serve.http import check_exposure

    with pytest.raises(ColdStartError, match="--token .* is blank"):
        check_exposure("127.0.0.1", "  ")


def test_after_a_500_the_same_keep_alive_connection_goes_on(service, monkeypatch):
    import json

    from recbole_fbsm.serve import http as service_module

    url, _ = service
    monkeypatch.setattr(service_module, "top_items", lambda *args: 1 / 0)
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/users/u0_0/items")
    answer = connection.getresponse()
    assert answer.status == 500 and "internal error" in json.loads(answer.read())["error"]
    connection.request("GET", "/health")  # the same connection: not reset
    answer = connection.getresponse()
    assert answer.status == 200 and json.loads(answer.read())["status"] == "ok"
    connection.close()


def test_the_workers_load_the_model_as_the_command_line_said(artifact, tmp_path, monkeypatch):
    """Each worker process rebuilds its state from the settings the supervisor leaves it: every loading option."""
    import uvicorn.supervisors

    from recbole_fbsm.serve import http as service_module
    from recbole_fbsm.serve.live import LiveState
    from recbole_fbsm.serve.store import open_store

    state = LiveState(str(artifact["path"]), open_store(str(tmp_path / "s.sqlite")), "cpu", None, "/data")
    built = {}

    class Supervisor:  # instead of uvicorn's, which would start the worker processes
        def __init__(self, config, sockets):
            pass

        def run(self):
            built["state"] = service_module.app_from_environment().app.state.live

    monkeypatch.setattr(uvicorn.supervisors, "Multiprocess", Supervisor)
    monkeypatch.setenv(service_module.SETTINGS_VARIABLE, "")  # restored after the test
    served = state.current().view.served  # the workers' own loading is not what is tested: their options are
    monkeypatch.setattr(service_module, "LiveState", lambda *args, **kwargs: LiveState(*args, served=served, **kwargs))
    service_module.run_service(state, port=0, workers=2)
    worker = built["state"]
    assert (worker.data_path, str(worker.device)) == ("/data", "cpu")
    worker.store.close()
