"""An HTTP service for a model artifact: new items in, top-N lists and explanations out, JSON both ways.

  recbole-fbsm serve http MODEL.fbsm --port 8000 [--new-items FILE]

Endpoints (all JSON):

- ``GET  /health``: status, model, number of users and of current new items;
- ``GET  /model``: what the artifact is (model, dataset, data fingerprint, feature fields, versions);
- ``GET  /items``: the ids of the current new items;
- ``POST /items``: add (or replace) new items, ``{"items": [{"id": "n1", "text": {"words": "raw text"}},
  {"id": "n2", "tokens": {"words": ["graph", "mine"]}}]}``; raw text goes through the dataset's analyzer;
  the answer counts ignored tokens and names items left without a known feature;
- ``DELETE /items/{id}``: remove a new item;
- ``GET  /users/{user}/items?top=10``: the user's top new items;
- ``GET  /items/{id}/users?top=10``: the users a new item should go to;
- ``GET  /users/{user}/items/{id}/explanation?top=10``: the score broken into features and liked items.

A bad request gets a 4xx answer ``{"error": "..."}`` and an unexpected failure a 500 one; neither stops
the service. Requests run concurrently (Starlette runs these handlers in its thread pool): the catalogue of
new items is replaced whole under a lock, so a request always scores one consistent catalogue.
"""

import contextlib
import socket
import threading
import time
import warnings

import scipy.sparse as sp
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.routing import Route

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.explain import explain
from recbole_fbsm.serve.new_items import NewItems, ServeWarning, new_items_from_cells, unknown_tokens_message
from recbole_fbsm.serve.recommend import recommend

MAX_TOP = 1000
MAX_ITEMS_PER_REQUEST = 10_000


class BadRequest(Exception):
    """A request the service cannot answer as asked (400, or ``status``)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class ItemCatalogue:
    """The current new items (ids and weighted rows). Changes build a new catalogue and swap it in under a
    lock; readers take the current one without waiting."""

    def __init__(self, n_features):
        self._lock = threading.Lock()
        self._items = NewItems("catalogue", [], sp.csr_matrix((0, n_features)), sp.csr_matrix((0, n_features)))

    @property
    def current(self):
        return self._items

    def add(self, items):
        """Add ``items`` (a ``NewItems``); items of the same id are replaced. Returns the replaced ids."""
        with self._lock:
            old = self._items
            new_ids = set(items.tokens)
            keep = [k for k, token in enumerate(old.tokens) if token not in new_ids]
            replaced = [token for token in old.tokens if token in new_ids]
            self._items = NewItems(
                "catalogue", [old.tokens[k] for k in keep] + list(items.tokens),
                sp.vstack([old.counts[keep], items.counts], format="csr"),
                sp.vstack([old.matrix[keep], items.matrix], format="csr"))
        return replaced

    def remove(self, token):
        with self._lock:
            old = self._items
            if token not in old.tokens:
                return False
            keep = [k for k, t in enumerate(old.tokens) if t != token]
            self._items = NewItems("catalogue", [old.tokens[k] for k in keep], old.counts[keep], old.matrix[keep])
        return True


def create_app(served, catalogue=None):
    """The Starlette application serving ``served`` (a ``ServedModel``)."""
    catalogue = catalogue or ItemCatalogue(served.features.n_features)
    app = Starlette(routes=[
        Route("/health", lambda request: _health(served, catalogue), methods=["GET"]),
        Route("/model", lambda request: JSONResponse(_model_document(served)), methods=["GET"]),
        Route("/items", lambda request: JSONResponse({"items": list(catalogue.current.tokens)}), methods=["GET"]),
        Route("/items", _handler(_add_items, served, catalogue, body=True), methods=["POST"]),
        Route("/items/{item}", _handler(_remove_item, served, catalogue), methods=["DELETE"]),
        Route("/users/{user}/items", _handler(_user_items, served, catalogue), methods=["GET"]),
        Route("/items/{item}/users", _handler(_item_users, served, catalogue), methods=["GET"]),
        Route("/users/{user}/items/{item}/explanation", _handler(_explanation, served, catalogue), methods=["GET"]),
    ], exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.served, app.state.catalogue = served, catalogue
    return app


def _handler(function, served, catalogue, body=False):
    """An endpoint: the body is parsed as JSON (when ``body``), the work runs in a worker thread, mistakes
    become 4xx answers."""

    async def endpoint(request):
        payload = None
        if body:
            try:
                payload = await request.json()
            except ValueError:
                return _error("the request body is not JSON", 400)
        try:
            return JSONResponse(await run_in_threadpool(function, served, catalogue, request, payload))
        except BadRequest as error:
            return _error(str(error), error.status)
        except ColdStartError as error:
            return _error(str(error), 400)

    return endpoint


def _error(message, status):
    return JSONResponse({"error": message}, status_code=status)


async def _http_error(request, error):
    return _error(error.detail, error.status_code)


async def _server_error(request, error):
    return _error(f"internal error ({type(error).__name__}: {error}); the service goes on", 500)


# ------------------------------------------------------------------------------------------ handlers
def _health(served, catalogue):
    return JSONResponse({"status": "ok", "model": served.model_name, "users": int(served.dataset.user_num - 1),
                         "new_items": len(catalogue.current.tokens)})


def _model_document(served):
    data = served.data or {}
    return {"model": served.model_name, "file": served.checkpoint, "dataset": served.dataset.dataset_name,
            "data_fingerprint": data.get("sha256"), "feature_fields": served.fields,
            "features": served.features.n_features, "users": int(served.dataset.user_num - 1),
            "items": int(served.dataset.item_num - 1)}


def _add_items(served, catalogue, request, payload):
    items = payload.get("items") if isinstance(payload, dict) else None
    if not isinstance(items, list) or not items:
        raise BadRequest('expected {"items": [{"id": ..., "text": {field: text}} or {"id": ..., "tokens": '
                         '{field: [tokens]}}, ...]}')
    if len(items) > MAX_ITEMS_PER_REQUEST:
        raise BadRequest(f"{len(items)} items in one request; at most {MAX_ITEMS_PER_REQUEST}")
    raw, tokenised = _parse_items(items, served)
    added, replaced, ignored, featureless, messages = [], [], 0, [], []
    for is_raw, group in ((True, raw), (False, tokenised)):
        if not group:
            continue
        ids = [item_id for item_id, _ in group]
        cells = {name: [values.get(name, "") for _, values in group] for name in served.fields}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ServeWarning)
            new = new_items_from_cells(served, ids, cells, is_raw, source="request", warn=False)
        if new.n_ignored or new.featureless:
            messages.append(unknown_tokens_message(new))
        replaced += catalogue.add(new)
        added += ids
        ignored += new.n_ignored
        featureless += new.featureless
    return {"added": added, "replaced": replaced, "total": len(catalogue.current.tokens),
            "ignored_token_occurrences": ignored, "featureless": featureless, "warnings": messages}


def _parse_items(items, served):
    """([(id, {field: raw text})], [(id, {field: token string})]) of the request's items."""
    separator = served.config["seq_separator"] or " "
    raw, tokenised = [], []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("id"), (str, int)) or str(item.get("id")).strip() == "":
            raise BadRequest(f"item {number}: expected an object with an \"id\" (a string) and \"text\" or \"tokens\"")
        kind = [key for key in ("text", "tokens") if key in item]
        if len(kind) != 1 or not isinstance(item[kind[0]], dict):
            raise BadRequest(f"item {item['id']!r}: expected exactly one of \"text\" or \"tokens\", an object "
                             f"{{field: ...}} over the feature fields {served.fields}")
        values = item[kind[0]]
        unknown = sorted(set(values) - set(served.fields))
        if unknown:
            raise BadRequest(f"item {item['id']!r}: unknown feature field(s) {unknown}; the model reads {served.fields}")
        cells = {}
        for name, value in values.items():
            if kind[0] == "tokens" and isinstance(value, list) and all(isinstance(t, str) for t in value):
                value = separator.join(value)
            if not isinstance(value, str):
                raise BadRequest(f"item {item['id']!r}, field {name!r}: expected "
                                 f"{'a string' if kind[0] == 'text' else 'a list of strings'}")
            cells[name] = value
        (raw if kind[0] == "text" else tokenised).append((str(item["id"]), cells))
    return raw, tokenised


def _remove_item(served, catalogue, request, payload):
    item = request.path_params["item"]
    if not catalogue.remove(item):
        raise BadRequest(f"new item {item!r} is not in the catalogue", 404)
    return {"removed": item, "total": len(catalogue.current.tokens)}


def _top(request):
    value = request.query_params.get("top", "10")
    try:
        top = int(value)
    except ValueError:
        raise BadRequest(f"top: expected a whole number; got {value!r}") from None
    if not 1 <= top <= MAX_TOP:
        raise BadRequest(f"top: expected 1 to {MAX_TOP}; got {top}")
    return top


def _known_user(served, user):
    mapping = served.dataset.field2token_id[served.uid_field]
    if mapping.get(user, 0) == 0:
        raise BadRequest(f"user {user!r} is not a user of dataset {served.dataset.dataset_name!r}", 404)


def _user_items(served, catalogue, request, payload):
    user, top = request.path_params["user"], _top(request)
    _known_user(served, user)
    items = catalogue.current
    if not items.tokens:
        return {"user": user, "items": [], "new_items": 0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ServeWarning)
        table = recommend(served, items, top=top, users=[user], for_items=False).for_users
    return {"user": user, "items": _records(table, "item_id"), "new_items": len(items.tokens),
            "warnings": [str(w.message) for w in caught if issubclass(w.category, ServeWarning)]}


def _item_users(served, catalogue, request, payload):
    item, top = request.path_params["item"], _top(request)
    items = catalogue.current
    if item not in items.tokens:
        raise BadRequest(f"new item {item!r} is not in the catalogue (POST it to /items first)", 404)
    row = items.tokens.index(item)
    one = NewItems("catalogue", [item], items.counts[[row]], items.matrix[[row]])
    table = recommend(served, one, top=top, for_users=False).for_items
    return {"item": item, "users": _records(table, "user_id")}


def _explanation(served, catalogue, request, payload):
    user, item, top = request.path_params["user"], request.path_params["item"], _top(request)
    _known_user(served, user)
    items = catalogue.current
    known = served.dataset.field2token_id[served.iid_field]
    if known.get(item, 0) == 0 and item not in items.tokens:
        raise BadRequest(f"item {item!r} is neither an item of the dataset nor a new item of the catalogue", 404)
    return explain(served, user, item, new_items=items).to_dict(top)


def _records(table, column):
    return [{column: str(getattr(row, column)), "rank": int(row.rank), "score": float(row.score)}
            for row in table.itertuples()]


# ------------------------------------------------------------------------------------------- running
def run_service(served, host="127.0.0.1", port=8000, new_items=None, log_level="warning"):
    """Serve ``served`` until interrupted (uvicorn)."""
    app = create_app(served)
    if new_items is not None:
        app.state.catalogue.add(new_items)
    sock = bound_socket(host, port)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])
    finally:
        sock.close()


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


@contextlib.contextmanager
def service_in_thread(app, host="127.0.0.1", port=0, timeout=30):
    """Run ``app`` on uvicorn in a background thread; yields the base URL (tests, benchmarks)."""
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
