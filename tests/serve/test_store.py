"""The live service's store (new items, likes, change log): the same tests on SQLite and on a real
PostgreSQL server that the tests start (skipped with the reason only where it cannot start)."""

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import postgres_server
import pytest
from helpers import cli_env

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.store import (
    ITEM,
    LIKE,
    RELOAD,
    ItemsGone,
    StoredItem,
    StoreError,
    StoreWarning,
    describe,
    open_store,
)


@pytest.fixture(scope="module")
def postgres():
    server, reason = postgres_server.start()
    if server is None:
        pytest.skip(f"PostgreSQL store tests: {reason}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path):
    """A fresh store location of each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite")
    return request.getfixturevalue("postgres").new_database()


def item(item_id, words="a b", raw=False):
    return StoredItem(item_id, raw, {"words": words})


def test_items_are_added_replaced_listed_and_deleted(location):
    store = open_store(location)
    assert store.put_items([item("n1"), item("n2", "raw text", raw=True)]) == []
    assert store.put_items([item("n1", "c d")]) == ["n1"]
    assert store.items() == [item("n1", "c d"), item("n2", "raw text", raw=True)]
    assert store.items(["n2", "missing"]) == [item("n2", "raw text", raw=True)]
    store.add_likes("u1", ["n1", "n2"])
    assert store.delete_item("n1") == ["u1"]  # the item's likes go with it
    assert store.delete_item("n1") is None
    assert [i.item_id for i in store.items()] == ["n2"] and store.likes("u1") == ["n2"]
    store.close()


def test_likes_are_added_once_listed_oldest_first_and_deleted(location):
    store = open_store(location)
    assert store.add_likes("u1", ["b", "a", "b"]) == ["b", "a"]
    assert store.add_likes("u1", ["a", "c"]) == ["c"]
    store.add_likes("u2", ["a"])
    assert store.likes("u1") == ["b", "a", "c"] and store.likes("nobody") == []
    assert store.delete_like("u1", "a") is True and store.delete_like("u1", "a") is False
    assert store.all_likes() == [("u1", "b"), ("u1", "c"), ("u2", "a")]
    store.close()


def test_the_change_log_names_every_write_in_order(location):
    store = open_store(location)
    start = store.last_change()
    store.put_items([item("n1")])
    store.add_likes("u1", ["n1", "d1"])
    store.delete_like("u1", "d1")
    store.request_reload()
    changes = store.changes_since(start)
    assert [(kind, user, item_id) for _, kind, user, item_id in changes] == [
        (ITEM, None, "n1"),
        (LIKE, "u1", "n1"),
        (LIKE, "u1", "d1"),
        (LIKE, "u1", "d1"),
        (RELOAD, None, None),
    ]
    seqs = [seq for seq, *_ in changes]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and store.last_change() == seqs[-1]
    assert store.changes_since(seqs[-1]) == []
    store.close()


def test_a_reopened_store_has_everything_and_a_second_connection_sees_writes_at_once(location):
    first, second = open_store(location), open_store(location)
    first.put_items([item("n1", "x y")])
    first.add_likes("u1", ["n1"])
    assert second.items() == [item("n1", "x y")] and second.likes("u1") == ["n1"]  # another worker's view
    assert [kind for _, kind, _, _ in second.changes_since(0)] == [ITEM, LIKE]
    first.close()
    second.close()
    again = open_store(location)
    assert again.items() == [item("n1", "x y")] and again.all_likes() == [("u1", "n1")]
    again.close()


def test_concurrent_writers_lose_nothing_and_sequence_numbers_stay_unique(location):
    stores = [open_store(location) for _ in range(3)]

    def writer(store, k):
        for n in range(15):
            store.add_likes(f"user{k}", [f"item{n}"])

    threads = [threading.Thread(target=writer, args=(store, k)) for k, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stores[0].all_likes()) == 45
    seqs = [seq for seq, *_ in stores[1].changes_since(0)]
    assert len(seqs) == 45 and len(set(seqs)) == 45
    for store in stores:
        store.close()


def test_ids_and_text_survive_the_round_trip(location):
    store = open_store(location)
    odd = "é ü 日本 'quote\" ; DROP TABLE items; --"
    store.put_items([StoredItem(odd, True, {"words": odd, "genre": ""})])
    store.add_likes(odd, [odd])
    assert store.items() == [StoredItem(odd, True, {"words": odd, "genre": ""})] and store.likes(odd) == [odd]
    store.close()


def test_a_bad_location_is_one_error(tmp_path):
    with pytest.raises(ColdStartError, match="does not exist"):
        open_store(str(tmp_path / "no" / "such" / "store.sqlite"))
    not_sqlite = tmp_path / "text.sqlite"
    not_sqlite.write_text("not a database " * 100)
    with pytest.raises(ColdStartError, match="not a store SQLite can open"):
        open_store(str(not_sqlite))
    with pytest.raises(ColdStartError, match=r"cannot connect") as caught:
        open_store("postgresql://someone:secret@127.0.0.1:1/nothing")
    assert "secret" not in str(caught.value) and "***" in str(caught.value)
    assert describe("postgresql://someone:secret@db.example/x") == "postgresql://someone:***@db.example/x"


WRITER = textwrap.dedent("""
    import sys
    from recbole_fbsm.serve.store import open_store
    store = open_store(sys.argv[1])
    for n in range(100000):
        store.add_likes("u", [f"i{n}"])
        print(n, flush=True)  # acknowledged: committed before this line
""")


def test_a_sigkilled_writer_loses_no_acknowledged_write(location):
    """A process writing as fast as it can is SIGKILLed; every write it acknowledged is there."""
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, location],
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    acknowledged = []
    for line in process.stdout:
        acknowledged.append(f"i{line.split()[0]}")
        if len(acknowledged) == 40:
            break
    process.send_signal(signal.SIGKILL)
    rest = process.stdout.read()
    process.wait()
    acknowledged += [f"i{line.split()[0]}" for line in rest.splitlines() if line.strip()]
    store = open_store(location)
    assert set(acknowledged) <= set(store.likes("u"))
    store.add_likes("u", ["after"])  # and the store goes on
    assert "after" in store.likes("u")
    store.close()


def test_a_store_file_deleted_or_replaced_in_use_refuses_writes(tmp_path):
    """A write into an unlinked file would be acknowledged and lost at the next start."""
    for replace in (False, True):
        path = tmp_path / f"s{replace}.sqlite"
        store = open_store(str(path))
        store.add_likes("u1", ["a"])
        path.unlink()
        if replace:
            open_store(str(path)).close()  # another store now has the name
        with pytest.raises(StoreError, match=rf"store {path.name} was deleted or replaced while in use"):
            store.add_likes("u1", ["b"])
        with pytest.raises(StoreError, match="deleted or replaced"):
            store.check()
        store.close()


FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    from recbole_fbsm.errors import ColdStartError
    from recbole_fbsm.serve.store import open_store
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
    try:
        open_store(sys.argv[1])
    except ColdStartError as error:
        print(f"error: {error}")
""")


@pytest.mark.parametrize("room", [0, 8192])
def test_a_store_on_a_full_disk_is_one_error_line(tmp_path, room):
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", FULL_DISK, str(tmp_path / "s.sqlite"), str(room)],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(),
    )
    assert done.stderr == "" and done.stdout.startswith("error: store s.sqlite: SQLite cannot use it"), done
    assert "not a store SQLite can open" not in done.stdout


def test_a_damaged_or_read_only_store_is_one_error(tmp_path):
    path = tmp_path / "s.sqlite"
    store = open_store(str(path))
    store.put_items([item(f"i{n}", "x " * 50) for n in range(500)])
    store.close()
    data = bytearray(path.read_bytes())
    for page in range(2, len(data) // 4096, 3):  # damaged pages, as a failing disk leaves them
        data[4096 * page + 100 : 4096 * page + 400] = b"\xff" * 300
    path.write_bytes(data)
    with pytest.raises(StoreError, match="store s.sqlite: SQLite cannot use it .database disk image is malformed"):
        open_store(str(path)).items()
    path.unlink()
    open_store(str(path)).close()
    with read_only(path):
        with pytest.raises(StoreError, match=r"store s\.sqlite is read-only .* expected a file the service can write"):
            open_store(str(path))


@contextlib.contextmanager
def read_only(path):
    """``path`` made read-only, for root too (the immutable attribute)."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("root, and chattr +i is not allowed here: a file cannot be made read-only")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)])
    else:
        path.chmod(0o444)
        yield


BAD_ROWS = [("bad1", 0, "not json"), ("bad2", 0, "[1,2]"), ("bad3", 1, '{"words": 5}'), (b"\xff", 0, '{"words": "x"}')]


BAD_LIKES = [(b"\x01", "good"), ("u0_0", b"\x02")]


def write_bad_rows(path):
    """Rows another program wrote into the items table, beside a good one."""
    store = open_store(str(path))
    store.put_items([item("good", "a b")])
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.executemany("INSERT INTO items (item_id, raw, cells) VALUES (?, ?, ?)", BAD_ROWS)
        connection.executemany("INSERT INTO likes (user_id, item_id, seq) VALUES (?, ?, 0)", BAD_LIKES)


def test_a_malformed_items_row_is_left_out_with_a_warning_naming_it(tmp_path):
    write_bad_rows(tmp_path / "s.sqlite")
    store = open_store(str(tmp_path / "s.sqlite"))
    with pytest.warns(StoreWarning) as warned:
        assert store.items() == [item("good", "a b")]
        assert store.items(["bad1", "good"]) == [item("good", "a b")]
    messages = [str(w.message) for w in warned]
    for name in ("'bad1'", "'bad2'", "'bad3'", "b'\\xff'"):
        assert any(f"table items, row {name}:" in m and "left out" in m for m in messages), messages
    with pytest.warns(StoreWarning) as warned:
        assert store.all_likes() == []
    assert [str(w.message).split(": ")[1] for w in warned] == [f"table likes, row {row!r}" for row in BAD_LIKES]
    with pytest.warns(StoreWarning, match=r"table likes, row \('u0_0', b'\\x02'\)"):
        assert store.likes("u0_0") == []
    store.close()


def test_a_like_of_a_new_item_deleted_before_the_write_is_not_stored(location):
    store = open_store(location)
    store.put_items([item("n1"), item("n2")])
    assert store.add_likes("u1", ["n2", "d1"], new_items=["n2"]) == ["n2", "d1"]
    store.delete_item("n1")  # between the service's check and its write
    with pytest.raises(ItemsGone, match=r"\['n1'\]"):
        store.add_likes("u1", ["n1", "d2"], new_items=["n1"])
    assert store.likes("u1") == ["n2", "d1"]  # nothing of the refused request
    store.close()
