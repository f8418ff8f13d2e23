"""The live service: likes that count at once (per model), the whole catalogue, the store across restarts,
reloads, export-likes, several workers, and SIGKILLs that lose no acknowledged write."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from helpers import cli_env, score_user
from http_helpers import AUTH, TOKEN, call, cli_service, free_port, healthy, live_service, train

from recbole_fbsm.serve.audience import audience_alpha
from recbole_fbsm.serve.live import liked_items
from recbole_fbsm.serve.store import default_store_path, open_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    artifacts, data = train(root, ["FBSM", "UFSM", "CoSim", "DropoutNet"])
    return {"root": root, "artifacts": artifacts, "data": data}


def new_item(data, token, new_id=None):
    features = data["features"][token]
    return {"id": new_id or token, "tokens": {"genre": [features["genre"]], "words": features["words"]}}


def scores_of(answer):
    return {entry["item_id"]: entry["score"] for entry in answer["items"]}


def other_topic_items(data, user, count=3):
    """Training items of a topic that ``user`` (of topic k, from ``u{k}_{n}``) did not like."""
    topic = int(user[1:].split("_")[0])
    liked = {item for u, item in data["likes"] if u == user}
    return [
        t for t, k in data["topic_of"].items() if k == (topic + 1) % 3 and t not in data["held_out"] and t not in liked
    ][:count]


@pytest.mark.parametrize("name", ["FBSM", "UFSM", "CoSim"])
def test_a_like_changes_the_next_answer_of_a_profile_model(trained, tmp_path, name):
    data = trained["data"]
    with live_service(trained["artifacts"][name], str(tmp_path / "s.sqlite"), token=TOKEN) as (url, state):
        items = [new_item(data, t) for t in data["held_out"][:4]]
        assert call(f"{url}/items", "POST", {"items": items}, headers=AUTH)[0] == 200
        user = "u0_1"
        before = call(f"{url}/users/{user}/items?top=1000")[1]
        liked = other_topic_items(data, user) + [data["held_out"][0]]
        status, answer = call(f"{url}/users/{user}/likes", "POST", {"items": liked}, headers=AUTH)
        assert status == 200 and answer["added"] == liked
        after = call(f"{url}/users/{user}/items?top=1000")[1]
        assert not set(liked) & set(scores_of(after))  # liked items leave the list
        common = set(scores_of(before)) & set(scores_of(after))
        changed = [item for item in common if abs(scores_of(before)[item] - scores_of(after)[item]) > 1e-6]
        assert len(changed) > len(common) // 2  # the profile grew: most scores moved
        # and exactly as the model scores a user whose training profile held those likes
        snapshot = state.current()
        ids, scores, _ = score_user(snapshot, user, "all")
        view = snapshot.view
        extra = view.matrix[[view.dataset_item(i) for i in liked[:-1]]].sum(0) + snapshot.catalogue.matrix[
            [snapshot.position[liked[-1]]]
        ].sum(0)
        assert np.isclose(
            scores, _direct_scores(view, user, np.asarray(extra).ravel(), ids, snapshot), rtol=1e-4, atol=1e-6
        ).all()
        assert call(f"{url}/users/{user}/likes/{liked[0]}", "DELETE", headers=AUTH)[0] == 200
        answer = call(f"{url}/users/{user}/likes")[1]
        assert liked[0] not in answer["likes"]
        assert set(answer["training_likes"]) == {i for u, i in data["likes"] if u == user} & set(view.warm_ids)
        assert healthy(url)


def _direct_scores(view, user, extra_profile, ids, snapshot):
    """Scores of ``ids`` from the model's own pieces: f_u = training profile + extra, W_u from the model."""
    model, internal = view.served.model, view.dataset_user(user)
    users = torch.tensor([internal])
    owner, cols, values, _ = model.F_U.gather_rows(users)
    f_u = np.zeros(model.n_features, dtype=np.float64)
    np.add.at(f_u, cols.numpy(), values.double().numpy())
    f_u += extra_profile
    c = model.diagonal_weights(users).double().numpy().reshape(-1)
    w = c * f_u
    factors = model.low_rank_factors()
    if factors is not None:
        V = factors.double().numpy()
        w = w + V @ (V.T @ f_u)
    rows = [
        view.matrix[view.dataset_item(i)] if view.dataset_item(i) else snapshot.catalogue.matrix[snapshot.position[i]]
        for i in ids
    ]
    return np.asarray([float(row.toarray().ravel() @ w) for row in rows])


def test_without_stored_likes_the_service_scores_as_the_model(trained, tmp_path):
    """scope=new for a dataset user equals the model's own score_feature_rows on the same rows."""
    data = trained["data"]
    with live_service(trained["artifacts"]["FBSM"], str(tmp_path / "s.sqlite")) as (url, state):
        call(f"{url}/items", "POST", {"items": [new_item(data, t) for t in data["held_out"][:5]]})
        snapshot = state.current()
        ids, scores, _ = score_user(snapshot, "u1_2", "new")
        model = snapshot.view.served.model
        expected = model.score_feature_rows(
            torch.tensor([snapshot.view.dataset_user("u1_2")]),
            snapshot.view.served.feature_rows(snapshot.catalogue.matrix),
        )[0].numpy()
        order = [snapshot.position[i] for i in ids]
        assert np.allclose(scores, expected[order], rtol=1e-5)


def test_scopes_rank_the_whole_catalogue(trained, tmp_path):
    data = trained["data"]
    with live_service(trained["artifacts"]["FBSM"], str(tmp_path / "s.sqlite")) as (url, state):
        new = [new_item(data, t, f"fresh_{t}") for t in data["held_out"][:3]]
        # the new items' feature rows are held-out items' rows, which are not training items
        call(f"{url}/items", "POST", {"items": new})
        view = state.current().view
        training = set(view.item_tokens[view.training_items])
        user = "u2_0"
        liked = {item for u, item in data["likes"] if u == user}
        answers = {
            scope: call(f"{url}/users/{user}/items?top=1000&scope={scope}")[1] for scope in ("all", "new", "warm")
        }
        everything = {e["item_id"] for e in answers["all"]["items"]}
        assert {e["item_id"] for e in answers["new"]["items"]} == {i["id"] for i in new}
        assert {e["item_id"] for e in answers["warm"]["items"]} == training - liked
        assert everything == (training - liked) | {i["id"] for i in new}
        assert [e["new"] for e in answers["new"]["items"]] == [True] * 3
        # one scorer for every scope: the same item has the same score in each
        for scope in ("new", "warm"):
            for entry in answers[scope]["items"]:
                assert scores_of(answers["all"])[entry["item_id"]] == pytest.approx(entry["score"], rel=1e-6)
        top = [e["item_id"] for e in answers["all"]["items"][:10]]
        # the user's topic leads (a third of the catalogue by chance; two epochs of training)
        assert sum(data["topic_of"].get(i, data["topic_of"].get(i.removeprefix("fresh_"))) == 2 for i in top) >= 5
        assert call(f"{url}/users/{user}/items?scope=cold")[0] == 400


def test_fair_ties_do_not_follow_catalogue_order(trained, tmp_path):
    """Items of identical rows tie; their order is random (seeded), not the order they were added in."""
    data = trained["data"]
    twins = [new_item(data, data["held_out"][0], f"twin{k:02d}") for k in range(30)]
    with live_service(trained["artifacts"]["FBSM"], str(tmp_path / "s.sqlite")) as (url, _):
        call(f"{url}/items", "POST", {"items": twins})
        answer = call(f"{url}/users/u0_0/items?top=30&scope=new")[1]
        order = [e["item_id"] for e in answer["items"]]
        assert len({e["score"] for e in answer["items"]}) == 1
        assert order != sorted(order) and order != sorted(order, reverse=True)


def test_new_users_and_models_with_learned_user_embeddings(trained, tmp_path):
    data = trained["data"]
    likes = {"items": other_topic_items(data, "u0_0", 4)}
    for name, status in (("FBSM", 200), ("CoSim", 200), ("UFSM", 409), ("DropoutNet", 409)):
        with live_service(trained["artifacts"][name], str(tmp_path / f"{name}.sqlite")) as (url, _):
            assert call(f"{url}/users/newbie/items")[0] == 404
            assert call(f"{url}/users/newbie/likes", "POST", likes)[0] == 200  # a new user is created
            code, answer = call(f"{url}/users/newbie/items?top=5")
            assert code == status, (name, answer)
            if status == 409:
                assert name in answer["error"] and "retrained" in answer["error"]
            else:  # the new user's list follows their likes' topic (a third of the items by chance)
                assert sum(data["topic_of"][e["item_id"]] == 1 for e in answer["items"]) >= 3
            assert healthy(url)
    with live_service(trained["artifacts"]["DropoutNet"], str(tmp_path / "d2.sqlite")) as (url, _):
        before = call(f"{url}/users/u0_0/items?top=1000")[1]
        call(f"{url}/users/u0_0/likes", "POST", likes)
        after = call(f"{url}/users/u0_0/items?top=1000")[1]
        assert "after retraining" not in after.get("note", "") and "retrained model" in after["note"]
        assert not set(likes["items"]) & set(scores_of(after))
        assert all(scores_of(before)[i] == s for i, s in scores_of(after).items())


def test_a_restart_restores_items_and_likes_and_the_same_answers(trained, tmp_path):
    data, store = trained["data"], str(tmp_path / "s.sqlite")
    with live_service(trained["artifacts"]["FBSM"], store) as (url, _):
        call(f"{url}/items", "POST", {"items": [new_item(data, t) for t in data["held_out"][:4]]})
        call(f"{url}/users/u1_0/likes", "POST", {"items": [data["held_out"][0], "k0i00"]})
        call(f"{url}/users/someone/likes", "POST", {"items": [data["held_out"][1]]})
        call(f"{url}/items/{data['held_out'][3]}", "DELETE")
        first = call(f"{url}/users/u1_0/items?top=20")[1]
    with live_service(trained["artifacts"]["FBSM"], store) as (url, _):
        assert sorted(call(f"{url}/items")[1]["items"]) == sorted(data["held_out"][:3])
        assert call(f"{url}/users/u1_0/likes")[1]["likes"] == [data["held_out"][0], "k0i00"]
        assert call(f"{url}/users/u1_0/items?top=20")[1] == first
        assert call(f"{url}/users/someone/items")[0] == 200


def test_deleting_a_liked_new_item_takes_its_likes(trained, tmp_path):
    data = trained["data"]
    with live_service(trained["artifacts"]["FBSM"], str(tmp_path / "s.sqlite")) as (url, _):
        call(f"{url}/items", "POST", {"items": [new_item(data, data["held_out"][0])]})
        call(f"{url}/users/u1_0/likes", "POST", {"items": [data["held_out"][0]]})
        assert call(f"{url}/items/{data['held_out'][0]}", "DELETE")[1]["likes_removed"] == 1
        assert call(f"{url}/users/u1_0/likes")[1]["likes"] == []
        assert call(f"{url}/users/u1_0/likes", "POST", {"items": [data["held_out"][0]]})[0] == 404


def test_reload_swaps_in_a_retrained_artifact_without_dropping_a_request(trained, tmp_path):
    data = trained["data"]
    model = tmp_path / "model.fbsm"
    model.write_bytes(open(trained["artifacts"]["FBSM"], "rb").read())
    with live_service(model, str(tmp_path / "s.sqlite"), token=TOKEN) as (url, state):
        call(f"{url}/items", "POST", {"items": [new_item(data, data["held_out"][0])]}, headers=AUTH)
        failures, stop = [], threading.Event()

        def reader():
            while not stop.is_set():
                code, answer = call(f"{url}/users/u0_0/items?top=5")
                if code != 200:
                    failures.append(answer)

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for thread in threads:
            thread.start()
        assert call(f"{url}/admin/reload", "POST")[0] == 401
        model.write_bytes(open(trained["artifacts"]["CoSim"], "rb").read())  # "retrained"
        code, answer = call(f"{url}/admin/reload", "POST", headers=AUTH)
        time.sleep(0.3)
        stop.set()
        for thread in threads:
            thread.join()
        assert code == 200 and answer["model"] == "CoSim" and answer["new_items"] == 1
        assert not failures and call(f"{url}/model")[1]["model"] == "CoSim"
        model.write_bytes(b"broken")  # a bad file: the old model goes on serving
        code, answer = call(f"{url}/admin/reload", "POST", headers=AUTH)
        assert code == 400 and call(f"{url}/model")[1]["model"] == "CoSim"


def test_export_likes_writes_atomic_files_to_retrain_on(trained, tmp_path):
    data = trained["data"]
    model = tmp_path / "m.fbsm"
    model.write_bytes(open(trained["artifacts"]["FBSM"], "rb").read())
    store = default_store_path(str(model))
    with live_service(model, store) as (url, _):
        raw = data["held_out"][1]
        call(
            f"{url}/items",
            "POST",
            {
                "items": [
                    new_item(data, data["held_out"][0]),
                    {
                        "id": raw,
                        "text": {
                            "genre": data["features"][raw]["genre"],
                            "words": " ".join(data["features"][raw]["words"]),
                        },
                    },
                ]
            },
        )
        call(f"{url}/users/u0_0/likes", "POST", {"items": [data["held_out"][0], "k1i00"]})
        call(f"{url}/users/fresh/likes", "POST", {"items": [raw]})
    out = tmp_path / "more"
    done = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm", "serve", "export-likes", store, "-o", str(out)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "more.inter").read_text().splitlines() == [
        "user_id:token\titem_id:token",
        f"u0_0\t{data['held_out'][0]}",
        "u0_0\tk1i00",
        f"fresh\t{raw}",
    ]
    lines = (out / "more.item").read_text().splitlines()
    assert lines[0] == "item_id:token\tgenre:token\twords:token_seq"
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in lines[1:]}
    for item in (data["held_out"][0], raw):
        assert rows[item] == [data["features"][item]["genre"], " ".join(data["features"][item]["words"])]
    done = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm", "serve", "export-likes", str(tmp_path / "none.sqlite"), "-o", str(out)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: store")


def test_two_workers_share_the_store_and_see_each_others_writes(trained, tmp_path):
    data = trained["data"]
    model = tmp_path / "w.fbsm"
    model.write_bytes(open(trained["artifacts"]["FBSM"], "rb").read())
    with cli_service([model, "--workers", 2, "--token", TOKEN], tmp_path, free_port()) as (process, url):
        # the service answers once one worker is up; the other may still be importing torch on a busy machine
        pids, deadline = set(), time.monotonic() + 120
        while len(pids) < 2:
            assert time.monotonic() < deadline, f"only worker {pids} answered /health in 120 s"
            pids.add(call(f"{url}/health")[1]["pid"])
        answered = set()
        for n in range(24):
            item = f"w{n}"
            code, _ = call(
                f"{url}/items", "POST", {"items": [new_item(data, data["held_out"][n % 9], item)]}, headers=AUTH
            )
            assert code == 200
            assert call(f"{url}/users/u0_{n % 5}/likes", "POST", {"items": [item]}, headers=AUTH)[0] == 200
            # each urllib call is a new connection: the kernel spreads them over both workers
            answer = call(f"{url}/users/u0_{n % 5}/likes")[1]
            assert item in answer["likes"]
            assert item in call(f"{url}/items")[1]["items"]
            answered.add(call(f"{url}/health")[1]["pid"])
        assert answered == pids  # both workers took part in the writes and reads above
        # a reload asked of one worker reaches the other through the store
        model.write_bytes(open(trained["artifacts"]["CoSim"], "rb").read())
        assert call(f"{url}/admin/reload", "POST", headers=AUTH)[1]["model"] == "CoSim"
        seen, deadline = {}, time.monotonic() + 120
        while len(seen) < 2 or set(seen.values()) != {"CoSim"}:
            assert time.monotonic() < deadline, seen
            health = call(f"{url}/health")[1]
            seen[health["pid"]] = health["model"]
            time.sleep(0.1)
        assert "w0" in call(f"{url}/items")[1]["items"]  # the store outlives the model swap


def test_sighup_swaps_in_a_retrained_artifact(trained, tmp_path):
    model = tmp_path / "h.fbsm"
    model.write_bytes(open(trained["artifacts"]["FBSM"], "rb").read())
    with cli_service([model], tmp_path, free_port()) as (process, url):
        assert call(f"{url}/users/u0_0/likes", "POST", {"items": ["k1i00"]})[0] == 200
        model.write_bytes(open(trained["artifacts"]["CoSim"], "rb").read())
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while call(f"{url}/model")[1]["model"] != "CoSim":  # answers go on meanwhile, from the old model
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        assert call(f"{url}/users/u0_0/likes")[1]["likes"] == ["k1i00"]


WRITES = 400


def test_sigkill_of_the_service_loses_no_acknowledged_write(trained, tmp_path):
    """Writers post likes; the service is SIGKILLed mid-way, restarted on its store: every like that got a 200 is
    there."""
    model = tmp_path / "k.fbsm"
    model.write_bytes(open(trained["artifacts"]["FBSM"], "rb").read())
    port = free_port()
    acknowledged = []
    with cli_service([model], tmp_path, port) as (process, url):

        def writer(k):
            for n in range(WRITES):
                try:
                    if (
                        call(f"{url}/users/killer{k}/likes", "POST", {"items": [f"k0i{n % 20:02d}"]}, timeout=5)[0]
                        == 200
                    ):
                        acknowledged.append((f"killer{k}", f"k0i{n % 20:02d}"))
                except OSError:
                    return

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        while len(acknowledged) < 20:
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGKILL)
        for thread in threads:
            thread.join()
    assert acknowledged
    with cli_service([model], tmp_path, port) as (process, url):
        for user in {u for u, _ in acknowledged}:
            stored = set(call(f"{url}/users/{user}/likes")[1]["likes"])
            assert {i for u, i in acknowledged if u == user} <= stored


def test_the_store_default_sits_beside_the_artifact(trained, tmp_path):
    model = tmp_path / "d.fbsm"
    model.write_bytes(open(trained["artifacts"]["CoSim"], "rb").read())
    with cli_service([model], tmp_path, free_port()) as (process, url):
        assert call(f"{url}/users/x/likes", "POST", {"items": ["k0i00"]})[0] == 200
        assert call(f"{url}/health")[1]["store"] == "d.fbsm.store.sqlite"
    assert open_store(default_store_path(str(model))).likes("x") == ["k0i00"]


def test_the_service_on_a_postgresql_store(trained, tmp_path):
    import postgres_server

    server, reason = postgres_server.start()
    if server is None:
        pytest.skip(f"PostgreSQL: {reason}")
    try:
        location = server.new_database()
        data = trained["data"]
        with live_service(trained["artifacts"]["FBSM"], location) as (url, _):
            call(f"{url}/items", "POST", {"items": [new_item(data, data["held_out"][0])]})
            call(f"{url}/users/u0_0/likes", "POST", {"items": [data["held_out"][0]]})
            first = call(f"{url}/users/u0_0/items?top=5")[1]
        with live_service(trained["artifacts"]["FBSM"], location) as (url, _):
            assert call(f"{url}/users/u0_0/likes")[1]["likes"] == [data["held_out"][0]]
            assert call(f"{url}/users/u0_0/items?top=5")[1] == first
    finally:
        server.stop()


@pytest.mark.parametrize("name", ["FBSM", "UFSM", "CoSim"])
def test_the_users_of_a_new_item_count_stored_likes(trained, tmp_path, name):
    """GET /items/{id}/users ranks every user with a like (training or stored) by the score their own list gives
    the item over their likes' count ** alpha; a user who likes it is left out; a user known only by stored likes
    is among them (not for UFSM, whose c_u is learned per user)."""
    data = trained["data"]
    with live_service(trained["artifacts"][name], str(tmp_path / "s.sqlite"), token=TOKEN) as (url, state):
        fresh = data["held_out"][:3]
        call(f"{url}/items", "POST", {"items": [new_item(data, t) for t in fresh]}, headers=AUTH)
        call(f"{url}/users/u1_0/likes", "POST", {"items": other_topic_items(data, "u1_0") + [fresh[1]]}, headers=AUTH)
        call(f"{url}/users/newcomer/likes", "POST", {"items": [fresh[1]]}, headers=AUTH)
        call(f"{url}/users/u2_2/likes", "POST", {"items": [fresh[0]]}, headers=AUTH)
        status, answer = call(f"{url}/items/{fresh[0]}/users?top=1000")
        assert status == 200
        listed = {entry["user_id"]: entry["score"] for entry in answer["users"]}
        snapshot = state.current()
        assert "u2_2" not in listed and ("newcomer" in listed) == (name != "UFSM")
        assert len(listed) == len({user for user, _ in data["likes"]}) - 1 + (name != "UFSM")
        for user in ("u1_0", "u0_3", "newcomer") if name != "UFSM" else ("u1_0", "u0_3"):
            ids, scores, _ = score_user(snapshot, user, "new")
            n_likes = sum(map(len, liked_items(snapshot, user)))  # divided by |I_u|^alpha (serve/audience.py)
            expected = float(scores[list(ids).index(fresh[0])]) * n_likes ** -audience_alpha(snapshot.view.served)
            assert listed[user] == pytest.approx(expected, rel=1e-5, abs=1e-7)
        scores = [entry["score"] for entry in answer["users"]]
        assert scores == sorted(scores, reverse=True)


def test_the_users_of_a_new_item_of_a_two_tower_model(trained, tmp_path):
    """DropoutNet has no user profile to rescore: GET /items/{id}/users ranks the training users by their learned
    embeddings (``recommend``), as ids with ranks 1..top and falling scores."""
    data = trained["data"]
    with live_service(trained["artifacts"]["DropoutNet"], str(tmp_path / "s.sqlite")) as (url, _):
        fresh = data["held_out"][0]
        assert call(f"{url}/items", "POST", {"items": [new_item(data, fresh)]})[0] == 200
        status, answer = call(f"{url}/items/{fresh}/users?top=4")
    assert status == 200 and answer["item"] == fresh
    users = answer["users"]
    assert [entry["rank"] for entry in users] == [1, 2, 3, 4]
    assert all(entry["user_id"] in {user for user, _ in data["likes"]} for entry in users)
    assert [entry["score"] for entry in users] == sorted((entry["score"] for entry in users), reverse=True)
