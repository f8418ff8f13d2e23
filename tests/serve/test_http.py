"""The HTTP service, over real HTTP on the loopback interface: answers, errors, concurrency."""

import threading

import numpy as np
import pytest
from http_helpers import call, live_service, train

from recbole_fbsm.serve import recommend


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("http")
    artifacts, data = train(root, ["FBSM"])
    with live_service(artifacts["FBSM"], str(root / "store.sqlite")) as (url, state):
        yield {"url": url, "served": state.current().view.served, "data": data}


def held_out_items(data, count=6):
    """Request items for held-out items: half as tokens, half as raw text."""
    items = []
    for k, token in enumerate(data["held_out"][:count]):
        features = data["features"][token]
        if k % 2:
            items.append({"id": token, "tokens": {"genre": [features["genre"]], "words": features["words"]}})
        else:
            items.append({"id": token, "text": {"genre": features["genre"], "words": " ".join(features["words"])}})
    return items


def test_new_items_are_added_scored_and_explained_over_http(service):
    url, served, data = service["url"], service["served"], service["data"]
    status, answer = call(f"{url}/items", "POST", {"items": held_out_items(data)})
    assert status == 200 and answer["total"] == 6 and sorted(answer["added"]) == sorted(data["held_out"][:6])
    user = served.user_tokens([1])[0]
    status, answer = call(f"{url}/users/{user}/items?top=3&scope=new")
    assert status == 200 and len(answer["items"]) == 3
    scores = [entry["score"] for entry in answer["items"]]
    assert scores == sorted(scores, reverse=True)
    # the same scores as the library's own recommend() on the same items
    expected = recommend(served, data["new_file"], top=len(data["held_out"]), users=[user], for_items=False).for_users
    expected = dict(zip(expected["item_id"], expected["score"]))
    for entry in answer["items"]:
        assert entry["score"] == pytest.approx(expected[entry["item_id"]], rel=1e-5)
    item = answer["items"][0]["item_id"]
    status, answer = call(f"{url}/items/{item}/users?top=5")
    assert status == 200 and len(answer["users"]) == 5
    status, answer = call(f"{url}/users/{user}/items/{item}/explanation?top=3")
    assert status == 200 and answer["model"] == "FBSM" and answer["new_item"] is True
    status, answer = call(f"{url}/model")
    assert (
        status == 200
        and answer["data_fingerprint"] == served.data["sha256"]
        and answer["feature_fields"] == ["genre", "words"]
    )


@pytest.mark.parametrize(
    "method, path, body, raw, status, message",
    [
        ("POST", "/items", None, b"{not json", 400, "not JSON"),
        ("POST", "/items", {"things": []}, None, 400, 'expected {"items"'),
        ("POST", "/items", {"items": [{"id": "q", "text": {"colour": "red"}}]}, None, 400, "unknown feature field"),
        ("POST", "/items", {"items": [{"id": "q", "tokens": {"words": 5}}]}, None, 400, "a list of strings"),
        (
            "POST",
            "/items",
            {"items": [{"id": "k0i00", "tokens": {"words": ["t0"]}}]},
            None,
            400,
            "already belong to items",
        ),
        (
            "POST",
            "/items",
            {"items": [{"id": "a", "tokens": {"words": ["t0"]}}, {"id": "a", "tokens": {"words": ["t1"]}}]},
            None,
            400,
            "more than once",
        ),
        ("GET", "/users/nobody/items", None, None, 404, "neither a user"),
        ("GET", "/users/u0_0/items?top=abc", None, None, 400, "whole number"),
        ("GET", "/users/u0_0/items?top=0", None, None, 400, "expected 1 to"),
        ("GET", "/items/missing/users", None, None, 404, "not in the catalogue"),
        ("DELETE", "/items/missing", None, None, 404, "not in the catalogue"),
        ("GET", "/nowhere", None, None, 404, "Not Found"),
    ],
)
def test_bad_requests_get_a_4xx_json_error_and_the_service_goes_on(service, method, path, body, raw, status, message):
    code, answer = call(service["url"] + path, method, body, raw)
    assert code == status and message in answer["error"]
    assert call(service["url"] + "/health")[0] == 200


def test_concurrent_requests_see_whole_catalogues(service):
    """Readers never fail or see half a catalogue while writers add and remove items."""
    url, served = service["url"], service["served"]
    user = served.user_tokens([2])[0]
    extra = [{"id": f"c{k}", "tokens": {"words": ["t1", f"n{k}"]}} for k in range(4)]
    failures, sizes = [], []

    def reader():
        for _ in range(15):
            code, answer = call(f"{url}/users/{user}/items?top=50")
            if code != 200:
                failures.append(answer)
            else:
                sizes.append(answer["new_items"])

    def writer():
        for _ in range(5):
            for method, body, path in (
                ("POST", {"items": extra}, "/items"),
                ("DELETE", None, "/items/c0"),
                ("DELETE", None, "/items/c1"),
                ("DELETE", None, "/items/c2"),
                ("DELETE", None, "/items/c3"),
            ):
                code, answer = call(url + path, method, body)
                if code != 200:
                    failures.append(answer)

    base = call(f"{url}/items")[1]["items"]
    threads = [threading.Thread(target=reader) for _ in range(8)] + [threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert set(np.unique(sizes)) <= set(range(len(base), len(base) + 5))  # never a catalogue mid-update
    assert call(f"{url}/items")[1]["items"] == base


def test_a_port_in_use_is_one_error(service):
    from recbole_fbsm.errors import ColdStartError
    from recbole_fbsm.serve.http import bound_socket

    port = int(service["url"].rsplit(":", 1)[1])
    with pytest.raises(ColdStartError, match=rf"cannot listen on 127.0.0.1:{port}: Address already in use"):
        bound_socket("127.0.0.1", port)
