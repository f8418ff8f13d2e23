"""The HTTP service of ``serve http``: a model artifact that remembers new items and likes (``serve/store.py``).
Endpoints, answers and limits (JSON only, bounded bodies, checked ids, a 500 naming a log line): docs/serve.md."""

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import time

import uvicorn.supervisors
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.routing import Route

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.explain import explain
from recbole_fbsm.serve.live import SCOPES, Conflict, LiveState, item_users, top_items, training_likes, weigh_group
from recbole_fbsm.serve.new_items import unknown_tokens_message
from recbole_fbsm.serve.store import ItemsGone, StoredItem, StoreError, by_kind, describe, open_store

MAX_TOP = 1000
MAX_ITEMS_PER_REQUEST = 10_000
MAX_ID_LENGTH = 256
DEFAULT_MAX_BODY = 8 << 20
TOKEN_VARIABLE = "RECBOLE_FBSM_TOKEN"
SETTINGS_VARIABLE = "RECBOLE_FBSM_SERVE_SETTINGS"  # the workers' settings (serve http --workers N)
# no lifespan: a second Ctrl-C would cancel it mid-wait and uvicorn would log that as a traceback
UVICORN = {"log_level": "warning", "lifespan": "off", "timeout_graceful_shutdown": 10}
NOT_TEXT = re.compile("[\x00\ud800-\udfff]")  # NUL and lone surrogates: neither stored, listed nor encoded

log = logging.getLogger("recbole_fbsm.serve.http")


class SafeJSONResponse(JSONResponse):
    """JSON that always encodes: non-finite floats become null (a NaN model answer is never a 500), text is
    ASCII-escaped (a lone surrogate can never fail the UTF-8 encoding)."""

    def render(self, content):
        text = json.dumps(content, separators=(",", ":"))
        if "NaN" in text or "Infinity" in text:  # JSON's NaN tokens read back as null (a string's "NaN" stays)
            text = json.dumps(json.loads(text, parse_constant=lambda _: None), separators=(",", ":"))
        return text.encode("ascii")


# what an id cannot be, with why (in order: the first broken rule is named): it could not be stored, listed,
# served or deleted
ID_RULES = (
    (lambda value: isinstance(value, (int, float)), "booleans and numbers are not ids; write the id as a JSON string"),
    (lambda value: not isinstance(value, str), "expected a string"),
    (lambda value: not value, "an id cannot be empty"),
    (lambda value: len(value) > MAX_ID_LENGTH, f"an id holds at most {MAX_ID_LENGTH} characters"),
    (lambda value: re.search("[\ud800-\udfff]", value), "an id cannot hold a lone surrogate (not text)"),
    (lambda value: "\x00" in value, "an id cannot hold NUL"),
    (
        lambda value: re.search("[\x00-\x1f\x7f-\x9f]", value),
        "an id cannot hold control characters (newline, tab, ...)",
    ),
    (lambda value: "/" in value, "an id cannot hold '/' (it could not be named in a URL path)"),
    (lambda value: value != value.strip(), "an id cannot start or end with white space"),
)


def check_id(value, what="id"):
    """``value`` if it is an id the service can store, list, serve and delete; else a ColdStartError (a 400)
    naming the rule."""
    broken = next((why for test, why in ID_RULES if test(value)), None)
    if broken:
        raise ColdStartError(f"{what} {value!r:.60}: {broken}")
    return value


# ------------------------------------------------------------------------------------------------ app
def create_app(state, token=None, max_body=DEFAULT_MAX_BODY):
    """The Starlette application of a ``LiveState``; POST and DELETE need ``token`` unless it is None."""
    routes = [
        ("GET", "/health", _health, False),
        ("GET", "/model", _model_document, False),
        ("GET", "/items", _list_items, False),
        ("POST", "/items", _add_items, True),
        ("DELETE", "/items/{item}", _remove_item, False),
        ("GET", "/users/{user}/items", _user_items, False),
        ("GET", "/users/{user}/likes", _list_likes, False),
        ("POST", "/users/{user}/likes", _add_likes, True),
        ("DELETE", "/users/{user}/likes/{item}", _remove_like, False),
        ("GET", "/items/{item}/users", _item_users, False),
        ("GET", "/users/{user}/items/{item}/explanation", _explanation, False),
        ("POST", "/admin/reload", _reload, False),
    ]
    app = Starlette(
        routes=[
            Route(path, _endpoint(function, method, body, token, max_body), methods=[method])
            for method, path, function, body in routes
        ],
        exception_handlers={
            HTTPException: lambda request, error: _error(error.detail, error.status_code),
            Conflict: lambda request, error: _error(str(error), 409),
            StoreError: lambda request, error: _error(str(error), 503),
            ItemsGone: lambda request, error: _error(str(error), 404),
            ColdStartError: lambda request, error: _error(str(error), 400),
            ClientDisconnect: _disconnected,
            Exception: _server_error,
        },
    )
    app.state.live = state
    return AccessLog(app)


class AccessLog:
    """ASGI middleware: one log line per request, ``METHOD path status ms`` (499: the client left, or the
    service stopped, before an answer)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        start, status = time.perf_counter(), [499]

        async def recording(message):
            status[0] = message.get("status", status[0])
            await send(message)

        try:
            await self.app(scope, receive, recording)
        except asyncio.CancelledError:
            # a forced stop (second Ctrl-C) cancels the requests still open: one line each, not a traceback
            log.warning("%s %s: cancelled, the service is stopping", scope.get("method"), scope["path"])
            if status[0] == 499:  # an answer, so that uvicorn has nothing to complain of
                with contextlib.suppress(Exception):
                    await _error("the service is stopping", 503)(scope, receive, recording)
        except Exception:
            # Starlette re-raises an error after its handler answered (a 500, logged there): uvicorn would then
            # close the keep-alive connection and reset the client's next request
            if status[0] == 499:
                raise
        finally:
            elapsed_ms = (time.perf_counter() - start) * 1000
            log.info("%s %s %s %.1f ms", scope.get("method"), scope["path"], status[0], elapsed_ms)


def _endpoint(function, method, body, token, max_body):
    """A route: auth, a bounded JSON body, checked path ids, then ``function(live, request, payload, **ids)`` in a
    worker thread; a mistake is raised, and answered by ``create_app``'s exception handlers."""

    async def endpoint(request):
        # the header's bytes (Starlette decodes them as latin-1) against the token's UTF-8 bytes, both without
        # surrounding white space (HTTP strips a value's trailing space)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if (
            method != "GET"
            and token is not None
            and not (
                scheme.lower() == "bearer"
                and hmac.compare_digest(given.encode("latin-1").strip(), token.encode().strip())
            )
        ):
            raise HTTPException(401, "missing or wrong token: send the header 'Authorization: Bearer TOKEN'")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if method == "POST" and kind != "application/json":  # bodiless POSTs too: no cross-site form sends JSON
            raise HTTPException(415, f"Content-Type {kind or '(none)'!r}: expected application/json")
        payload = await _read_json(request, max_body) if body else None
        ids = {name: check_id(value, f"{name} id") for name, value in request.path_params.items()}
        return SafeJSONResponse(await run_in_threadpool(function, request.app.state.live, request, payload, **ids))

    return endpoint


async def _read_json(request, max_body):
    """The body as JSON: 413 past ``max_body`` bytes (counted while it arrives, before any parsing; Starlette's
    own limit answers in plain text), 400 when it is not JSON."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body:
            raise HTTPException(413, f"request body over {max_body} bytes (--max-body)")
    try:
        return json.loads(body)
    except RecursionError:
        raise HTTPException(400, "the request body nests too deeply to be read") from None
    except ValueError:
        raise HTTPException(400, "the request body is not JSON (UTF-8)") from None


def _disconnected(request, error):
    log.warning(
        "%s %s: the client disconnected before its request body was read whole", request.method, request.url.path
    )
    return _error("client disconnected", 499)


def _error(message, status):
    return SafeJSONResponse({"error": message}, status_code=status)


async def _server_error(request, error):
    """A 500: the answer names an id, the log line with that id has the exception; never its text in the answer."""
    incident = os.urandom(6).hex()
    log.error("internal error %s on %s %s", incident, request.method, request.url.path, exc_info=error)
    return _error(f"internal error (id {incident}: see the service's log); the service goes on", 500)


# ------------------------------------------------------------------------------------------- handlers
def _health(live, request, payload):
    live.store.check()  # a deleted store is a 503, not "ok"
    snapshot = live.current()
    return {
        "status": "ok",
        "model": snapshot.view.name,
        "users": int(snapshot.view.served.dataset.user_num - 1),
        "new_items": len(snapshot.catalogue.tokens),
        "users_with_stored_likes": len(snapshot.likes),
        "store": describe(live.store.location),
        "pid": os.getpid(),
    }


def _model_document(live, request, payload):
    served = live.current().view.served
    return {
        "model": served.model_name,
        "file": os.path.basename(served.checkpoint),
        "dataset": served.dataset.dataset_name,
        "data_fingerprint": (served.data or {}).get("sha256"),
        "feature_fields": served.fields,
        "features": served.features.n_features,
        "users": int(served.dataset.user_num - 1),
        "items": int(served.dataset.item_num - 1),
        "training_items": int(len(served.training_items())),
    }


def _list_items(live, request, payload):
    snapshot = live.current()
    return {
        "items": list(snapshot.catalogue.tokens),
        "not_served": [{"item_id": item, "reason": why} for item, why in sorted(snapshot.skipped.items())],
    }


def _request_items(payload, shape, what):
    """``payload["items"]``: a list of 1 to ``MAX_ITEMS_PER_REQUEST`` entries, else a 400 showing ``shape``."""
    items = payload.get("items") if isinstance(payload, dict) else None
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS_PER_REQUEST:
        raise HTTPException(400, f"expected {shape}, 1 to {MAX_ITEMS_PER_REQUEST} {what} in one request")
    return items


def _add_items(live, request, payload):
    shape = '{"items": [{"id": ..., "text": {field: text}} or {"id": ..., "tokens": {field: [tokens]}}, ...]}'
    served = live.current().view.served
    stored = _parse_items(_request_items(payload, shape, "items"), served)
    weighed = [weigh_group(served, group, "request") for group in by_kind(stored)]  # a 400 before anything is stored
    replaced = live.store.put_items(stored)
    return {
        "added": [s.item_id for s in stored],
        "replaced": replaced,
        "total": len(live.current().catalogue.tokens),
        "ignored_token_occurrences": sum(new.n_ignored for new in weighed),
        "featureless": [item for new in weighed for item in new.featureless],
        "warnings": [unknown_tokens_message(new) for new in weighed if new.n_ignored or new.featureless],
    }


def _parse_items(items, served):
    """The request's items as ``StoredItem``s, each id once: {field: cell} of its raw text, or of its tokens joined
    by the dataset's separator."""
    parsed = {}
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or "id" not in item:
            raise HTTPException(
                400, f'item {number}: expected an object with an "id" (a string) and "text" or "tokens"'
            )
        item_id = check_id(item["id"], f"item {number}: id")
        if item_id in parsed:
            raise HTTPException(400, f"item id {item_id!r} appears more than once in the request")
        kinds = [key for key in ("text", "tokens") if key in item]
        values = item[kinds[0]] if len(kinds) == 1 else None
        if not isinstance(values, dict):
            shape = 'exactly one of "text" or "tokens", an object {field: ...} over the feature fields'
            raise HTTPException(400, f"item {item_id!r}: expected {shape} {served.fields}")
        unknown = sorted(set(values) - set(served.fields))
        if unknown:
            raise HTTPException(
                400, f"item {item_id!r}: unknown feature field(s) {unknown}; the model reads {served.fields}"
            )
        raw, cells = kinds[0] == "text", {}
        for name, value in values.items():
            if not raw and isinstance(value, list) and all(isinstance(t, str) for t in value):
                value = (served.config["seq_separator"] or " ").join(value)
            if not isinstance(value, str) or NOT_TEXT.search(value):
                expected = "a string" if raw else "a list of strings"
                raise HTTPException(
                    400, f"item {item_id!r}, field {name!r}: expected {expected} (no NUL, no lone surrogate)"
                )
            cells[name] = value
        parsed[item_id] = StoredItem(item_id, raw, cells)
    return list(parsed.values())


def _remove_item(live, request, payload, item):
    users = live.store.delete_item(item)
    if users is None:
        raise HTTPException(404, f"new item {item!r} is not in the catalogue")
    return {"removed": item, "likes_removed": len(users), "total": len(live.current().catalogue.tokens)}


def _top(request):
    value = request.query_params.get("top", "10")
    if not value.isdecimal() or not 1 <= int(value) <= MAX_TOP:
        raise HTTPException(400, f"top: expected 1 to {MAX_TOP}, a whole number; got {value!r}")
    return int(value)


def _known_user(snapshot, user):
    if not snapshot.knows_user(user):
        raise HTTPException(
            404,
            f"user {user!r} is neither a user of dataset {snapshot.view.served.dataset.dataset_name!r} "
            "nor one with stored likes (POST /users/{user}/likes creates one)",
        )


def _user_items(live, request, payload, user):
    top, scope = _top(request), request.query_params.get("scope", "all")
    if scope not in SCOPES:
        raise HTTPException(400, f"scope: expected one of {', '.join(SCOPES)}; got {scope!r}")
    snapshot = live.current()
    _known_user(snapshot, user)
    ranked, note = top_items(snapshot, user, scope, top)
    titles = _titles(live, snapshot, [item for item, _ in ranked])
    items = [
        {"item_id": item, "rank": rank, "score": score, "new": item in snapshot.position, **titles.get(item, {})}
        for rank, (item, score) in enumerate(ranked, 1)
    ]
    answer = {"user": user, "scope": scope, "items": items, "new_items": len(snapshot.catalogue.tokens)}
    return {**answer, "note": note} if note else answer


def _list_likes(live, request, payload, user):
    snapshot = live.current()
    _known_user(snapshot, user)
    training = snapshot.view.item_tokens[training_likes(snapshot.view, user)]
    return {"user": user, "likes": list(snapshot.likes.get(user, ())), "training_likes": [str(t) for t in training]}


def _add_likes(live, request, payload, user):
    given = _request_items(payload, '{"items": ["item id", ...]}', "likes")
    items = [check_id(item, f"likes item {number}") for number, item in enumerate(given, 1)]
    snapshot = live.current()
    unknown = [item for item in items if not snapshot.knows_item(item)]
    if unknown:
        raise HTTPException(404, f"item(s) {unknown[:10]} are neither items of the dataset nor stored new items")
    added = live.store.add_likes(user, items, [item for item in items if not snapshot.view.dataset_item(item)])
    return {"user": user, "added": added, "likes": len(live.current().likes.get(user, ()))}


def _remove_like(live, request, payload, user, item):
    if not live.store.delete_like(user, item):
        raise HTTPException(404, f"user {user!r} has no stored like of item {item!r}")
    return {"user": user, "removed": item, "likes": len(live.current().likes.get(user, ()))}


def _item_users(live, request, payload, item):
    top = _top(request)
    snapshot = live.current()
    if item not in snapshot.position:
        raise HTTPException(404, f"new item {item!r} is not in the catalogue (POST it to /items first)")
    users = [
        {"user_id": user, "rank": rank, "score": score}
        for rank, (user, score) in enumerate(item_users(snapshot, item, top), 1)
    ]
    return {"item": item, **_titles(live, snapshot, [item]).get(item, {}), "users": users}


def _titles(live, snapshot, items):
    """{item: {"title": ...}} where the model's data has a title field (ml-100k's movie_title): a dataset item's
    from the artifact, a new item's as it was posted; {} otherwise (answers then name items by id alone)."""
    titles = snapshot.view.served.titles
    if not titles:
        return {}
    new = [item for item in items if item in snapshot.position]
    posted = {s.item_id: s.cells.get(titles["field"], "") for s in live.store.items(new)} if new else {}
    return {i: {"title": posted.get(i, titles["items"][snapshot.view.dataset_item(i)])} for i in items}


def _explanation(live, request, payload, user, item):
    top = _top(request)
    snapshot = live.current()
    if not snapshot.view.dataset_user(user):
        raise HTTPException(
            404,
            f"user {user!r} is not a user of dataset {snapshot.view.served.dataset.dataset_name!r} "
            "(explanations read the training profile)",
        )
    if not snapshot.knows_item(item):
        raise HTTPException(404, f"item {item!r} is neither an item of the dataset nor a new item of the catalogue")
    return explain(snapshot.view.served, user, item, new_items=snapshot.catalogue).to_dict(top)


def _reload(live, request, payload):
    snapshot = live.reload()
    name, new_items = os.path.basename(live.model_path), len(snapshot.catalogue.tokens)
    return {"reloaded": name, "model": snapshot.view.name, "new_items": new_items}


# ------------------------------------------------------------------------------------------- running
def check_exposure(host, token):
    """A ColdStartError for a service reachable from other machines that anyone could write to, or a blank token."""
    if token is not None and not token.encode().strip():
        raise ColdStartError(f"--token (or {TOKEN_VARIABLE}) is blank: expected a secret that requests send.")
    with contextlib.suppress(ValueError):
        if token or host == "localhost" or ipaddress.ip_address(host).is_loopback:
            return
    raise ColdStartError(
        f"--host {host} listens beyond this machine without a token: anyone could add items "
        f"and likes; give --token (or set {TOKEN_VARIABLE}), or listen on 127.0.0.1."
    )


def configure_logging():
    """Log lines (access lines included) to stderr, once."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s [%(process)d] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.INFO)


def app_from_environment():
    """The application of one worker process (``serve http --workers N``): settings from ``SETTINGS_VARIABLE``."""
    model, store, device, data_path, token, max_body = json.loads(os.environ[SETTINGS_VARIABLE])
    configure_logging()
    try:
        state = LiveState(model, open_store(store), device, data_path=data_path)
    except ColdStartError as error:  # one line, not a traceback (an artifact replaced by a broken file)
        log.error("worker cannot start: %s", error)
        raise SystemExit(1) from None
    return create_app(state, token, max_body)


class QuietServer(uvicorn.Server):
    """uvicorn's server, ended quietly by Ctrl-C: uvicorn re-raises the captured signal inside the event loop at
    exit, where asyncio turns it into a KeyboardInterrupt that cancels the requests still open and logs each as a
    traceback (a second Ctrl-C during a request). The shutdown itself is uvicorn's (graceful, then forced)."""

    @contextlib.contextmanager
    def capture_signals(self):
        with super().capture_signals():
            yield
            self._captured_signals.clear()


def run_service(state, host="127.0.0.1", port=8000, token=None, max_body=DEFAULT_MAX_BODY, workers=1):
    """Serve until interrupted. One worker: ``state`` in this process. Several: uvicorn's supervisor starts
    ``workers`` processes that share the socket and ``state``'s store, each with its own model on ``state``'s
    device; SIGHUP to the supervisor replaces them one by one (the artifact read again), each new one ready first."""
    configure_logging()
    sock = bound_socket(host, port)
    auth = ", token required for POST/DELETE" if token else ""
    where = f"http://{host}:{sock.getsockname()[1]} (store {describe(state.store.location)}, {workers} worker(s)"
    log.warning("serving %s on %s%s)", os.path.basename(state.model_path), where, auth)
    try:
        if workers <= 1:
            if hasattr(signal, "SIGHUP"):  # reload the artifact, in a thread; the old model serves meanwhile
                signal.signal(signal.SIGHUP, lambda number, frame: state.in_background(state.reload))
            QuietServer(uvicorn.Config(create_app(state, token, max_body), **UVICORN)).run(sockets=[sock])
        else:
            state.store.close()
            settings = [state.model_path, state.store.location, str(state.device), state.data_path, token, max_body]
            os.environ[SETTINGS_VARIABLE] = json.dumps(settings)
            # a SIGHUP replacement has 120 s to load its model (uvicorn's 5 s default kills one still importing
            # torch, and drops the restart); the old workers answer meanwhile
            config = uvicorn.Config(
                f"{__name__}:app_from_environment",
                factory=True,
                workers=workers,
                timeout_worker_healthcheck=120,
                **UVICORN,
            )
            uvicorn.supervisors.Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:  # a second Ctrl-C while requests finish
        log.warning("interrupted")
    finally:
        sock.close()
        log.warning("stopped (pid %d)", os.getpid())


def bound_socket(host, port):
    """A TCP socket bound to (host, port); a ColdStartError when the port is taken or the address is not ours."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP given, so that asyncio sets TCP_NODELAY on each connection (it checks the protocol): else a
    # response's header and body segments wait on the client's delayed ACK, 40 ms per request on Linux
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ColdStartError(f"cannot listen on {host}:{port}: {error.strerror or error}.") from None
    return sock
