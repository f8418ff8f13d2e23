"""Where the live service keeps what it learns after training: new items and users' likes, in SQLite or
PostgreSQL behind one ``Store``. Items are kept as the request gave them (raw text or tokens), so that a retrained
artifact reads them with its own vocabulary; durability and the change log: docs/serve.md, "The store".
"""

import contextlib
import json
import os
import re
import sqlite3
import threading
import warnings
from dataclasses import dataclass

from recbole_fbsm.errors import ColdStartError

ITEM, LIKE, RELOAD = "item", "like", "reload"
WRITE_LOCK = 0x46_42_53_4D  # PostgreSQL advisory lock key of the store's writes ("FBSM")


@dataclass(frozen=True)
class StoredItem:
    item_id: str
    raw: bool  # cells are raw text (analysed as the converter did), else token strings
    cells: dict  # {feature field: text}


def by_kind(stored):
    """The ``StoredItem``s given as raw text, then those given as tokens (each kind weighed in one call), if any."""
    return [group for group in ([s for s in stored if s.raw], [s for s in stored if not s.raw]) if group]


def _all_text(*values):
    return all(isinstance(value, str) for value in values)


class StoreError(ColdStartError):
    """The store cannot be used (deleted, read-only, full, damaged, unreachable): one line at start, a 503 while
    serving; nothing is acknowledged that it did not keep."""


class ItemsGone(LookupError):
    """New items deleted between a request's check and its write."""


class StoreWarning(UserWarning):
    """A row of the store that cannot be used (written by another program): left out, and named."""


class Store:
    """New items and likes, shared by every worker. Methods are thread-safe; each write is durable when it
    returns. Subclasses give ``_connect``, ``begin_write`` (the statement that takes the write lock), ``_log``
    (append a change; its sequence number) and their SQL dialect."""

    placeholder = "?"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    begin_write = "BEGIN IMMEDIATE"
    errors = (sqlite3.Error,)  # the driver's errors: a store that cannot be used

    def __init__(self, location):
        self.location = location
        # two connections: reads (every request) never wait behind a write's commit (an fsync)
        self._lock, self._read_lock = threading.Lock(), threading.Lock()
        self._connection = self._connect()
        with self._write() as write:
            for statement in self._schema():
                write(statement)
        self._reader = self._connect()

    def _sql(self, statement):
        return statement.replace("?", self.placeholder)

    def _schema(self):
        return [
            "CREATE TABLE IF NOT EXISTS items (item_id TEXT PRIMARY KEY, raw INTEGER NOT NULL, cells TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS likes (user_id TEXT NOT NULL, item_id TEXT NOT NULL, seq BIGINT NOT NULL, "
            "PRIMARY KEY (user_id, item_id))",
            f"CREATE TABLE IF NOT EXISTS changes (seq {self.serial}, kind TEXT NOT NULL, user_id TEXT, item_id TEXT)",
            "CREATE INDEX IF NOT EXISTS likes_of_item ON likes (item_id)",
        ]

    @contextlib.contextmanager
    def _write(self):
        """One write transaction, committed (durably) on a clean exit, rolled back on an exception; yields
        ``execute(statement, parameters)``, which returns the cursor."""
        with self._lock, contextlib.closing(self._connection.cursor()) as cursor:
            self.check()
            try:
                cursor.execute(self.begin_write)
                yield lambda statement, parameters=(): cursor.execute(self._sql(statement), parameters)
                self._connection.commit()
            except BaseException as error:
                with contextlib.suppress(*self.errors):
                    self._connection.rollback()
                if isinstance(error, self.errors):
                    raise self.failure(error) from None
                raise

    def _read(self, statement, parameters=()):
        with self._read_lock, contextlib.closing(self._reader.cursor()) as cursor:
            try:
                rows = cursor.execute(self._sql(statement), parameters).fetchall()
                self._reader.rollback()  # ends PostgreSQL's implicit read transaction: the next read sees new commits
            except self.errors as error:
                raise self.failure(error) from None
        return rows

    def check(self):
        """A ``StoreError`` when writes would not be kept (``SqliteStore``: its file was deleted)."""

    def failure(self, error):
        """The ``StoreError`` of a driver error."""
        return StoreError(f"store {describe(self.location)}: cannot be used ({_first_line(error)}).")

    def changes_since(self, seq):
        """[(seq, kind, user, item)] after ``seq``, in order."""
        return self._read("SELECT seq, kind, user_id, item_id FROM changes WHERE seq > ? ORDER BY seq", (int(seq),))

    def last_change(self):
        return int(self._read("SELECT MAX(seq) FROM changes")[0][0] or 0)

    def put_items(self, items):
        """Add or replace ``items`` (``StoredItem``s); the ids that replaced an item."""
        replaced = []
        with self._write() as write:
            for item in items:
                if write("SELECT 1 FROM items WHERE item_id = ?", (item.item_id,)).fetchone():
                    replaced.append(item.item_id)
                write(
                    "INSERT INTO items (item_id, raw, cells) VALUES (?, ?, ?) ON CONFLICT (item_id) "
                    "DO UPDATE SET raw = excluded.raw, cells = excluded.cells",
                    (item.item_id, int(item.raw), json.dumps(item.cells)),
                )
                self._log(write, ITEM, item=item.item_id)
        return replaced

    def delete_item(self, item_id):
        """Remove a new item and every like of it; None if there was none, else the users whose likes went."""
        with self._write() as write:
            users = [row[0] for row in write("SELECT user_id FROM likes WHERE item_id = ?", (item_id,)).fetchall()]
            if not write("DELETE FROM items WHERE item_id = ?", (item_id,)).rowcount:
                return None
            write("DELETE FROM likes WHERE item_id = ?", (item_id,))
            for user in users:
                self._log(write, LIKE, user=user, item=item_id)
            self._log(write, ITEM, item=item_id)
        return users

    def items(self, ids=None):
        """Every stored item (or those of ``ids`` that exist), in id order."""
        select = "SELECT item_id, raw, cells FROM items"
        if ids is None:
            rows = self._read(select)
        else:  # in parts of 500: a statement binds a bounded number of parameters
            ids, rows = list(ids), []
            for part in (ids[start : start + 500] for start in range(0, len(ids), 500)):
                rows += self._read(f"{select} WHERE item_id IN ({', '.join('?' * len(part))})", part)
        rows = self._texts(
            "items", sorted(rows, key=lambda row: str(row[0])), lambda *row: _item_cells(*row) is not None
        )
        return [StoredItem(item_id, bool(raw), _item_cells(item_id, raw, cells)) for item_id, raw, cells in rows]

    def add_likes(self, user, items, new_items=()):
        """Record that ``user`` likes ``items``; the items newly liked (in the given order). ``new_items``, those
        of ``items`` that are stored new items, are checked in the write's transaction: ``ItemsGone`` (nothing
        stored) if one was deleted since the caller looked."""
        added = []
        with self._write() as write:
            gone = [i for i in new_items if not write("SELECT 1 FROM items WHERE item_id = ?", (i,)).fetchone()]
            if gone:
                raise ItemsGone(f"item(s) {gone[:10]} were deleted while the like was being written: not stored")
            for item in dict.fromkeys(items):
                if write("SELECT 1 FROM likes WHERE user_id = ? AND item_id = ?", (user, item)).fetchone():
                    continue
                seq = self._log(write, LIKE, user=user, item=item)
                write("INSERT INTO likes (user_id, item_id, seq) VALUES (?, ?, ?)", (user, item, seq))
                added.append(item)
        return added

    def delete_like(self, user, item):
        """Forget one like; whether there was one."""
        with self._write() as write:
            if not write("DELETE FROM likes WHERE user_id = ? AND item_id = ?", (user, item)).rowcount:
                return False
            self._log(write, LIKE, user=user, item=item)
        return True

    def likes(self, user):
        """The items ``user`` liked, oldest first."""
        rows = self._read("SELECT user_id, item_id FROM likes WHERE user_id = ? ORDER BY seq", (user,))
        return [item for _, item in self._texts("likes", rows)]

    def all_likes(self):
        """[(user, item)] of every stored like, oldest first."""
        return self._texts("likes", self._read("SELECT user_id, item_id FROM likes ORDER BY seq"))

    def _texts(self, table, rows, valid=_all_text):
        """The ``rows`` that ``valid`` accepts; a warning names each other one (written by another program)."""
        for row in (row for row in rows if not valid(*row)):
            expected = "a text id and cells holding a JSON object of feature texts" if table == "items" else "text"
            warnings.warn(
                f"store {describe(self.location)}: table {table}, row {row[0] if table == 'items' else tuple(row)!r}: "
                f"expected {expected} (written by another program?); left out",
                StoreWarning,
                stacklevel=3,
            )
        return [row for row in rows if valid(*row)]

    def request_reload(self):
        """Ask every worker to read the artifact again (``POST /admin/reload``); the change's number."""
        with self._write() as write:
            return self._log(write, RELOAD)

    def close(self):
        with self._lock, self._read_lock:
            self._connection.close()
            self._reader.close()


class SqliteStore(Store):
    """The store in one SQLite file: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE`` writes."""

    def _connect(self):
        folder = os.path.dirname(os.path.abspath(self.location))
        if not os.path.isdir(folder):
            raise ColdStartError(f"--store {self.location}: folder {folder} does not exist.")
        try:
            connection = sqlite3.connect(self.location, isolation_level=None, check_same_thread=False, timeout=30)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as error:
            raise self.failure(error) from None
        self._file = _identity(self.location)
        return connection

    def check(self):
        if _identity(self.location) != self._file:
            raise StoreError(
                f"store {describe(self.location)} was deleted or replaced while in use: a write into it would be "
                "lost, so writes are refused; put the file back, or restart the service on a new store."
            )

    def failure(self, error):
        name, reason = describe(self.location), _first_line(error)
        if "readonly" in reason:
            return StoreError(
                f"store {name} is read-only ({reason}): new items and likes are written there; expected a file the "
                "service can write, in a folder it can write (SQLite's -wal and -shm files go beside it)."
            )
        why = "not a store SQLite can open" if "not a database" in reason else "SQLite cannot use it"
        return StoreError(f"store {name}: {why} ({reason}).")

    def _schema(self):
        return super()._schema() + ["PRAGMA user_version = 1"]  # a write: a read-only file fails at start

    def _log(self, write, kind, user=None, item=None):
        """Append a change; its sequence number (no RETURNING: SQLite before 3.35 lacks it)."""
        return write("INSERT INTO changes (kind, user_id, item_id) VALUES (?, ?, ?)", (kind, user, item)).lastrowid


class PostgresStore(Store):
    """The store on a PostgreSQL server (psycopg 3). Writes hold one transaction-scoped advisory lock, so
    they run one at a time across workers and machines, and sequence numbers commit in order (the tables'
    creation by workers starting together included)."""

    placeholder = "%s"
    serial = "BIGSERIAL PRIMARY KEY"
    begin_write = f"SELECT pg_advisory_xact_lock({WRITE_LOCK})"

    def _connect(self):
        try:
            import psycopg
        except ImportError:
            raise ColdStartError(
                f"--store {describe(self.location)}: the PostgreSQL store needs psycopg "
                "(pip install 'recbole-fbsm[postgres]')."
            ) from None
        self.errors = (psycopg.Error,)
        try:
            return psycopg.connect(self.location, connect_timeout=10)
        except psycopg.Error as error:
            raise StoreError(f"--store {describe(self.location)}: cannot connect: {_first_line(error)}") from None

    def _log(self, write, kind, user=None, item=None):
        return write(
            "INSERT INTO changes (kind, user_id, item_id) VALUES (?, ?, ?) RETURNING seq", (kind, user, item)
        ).fetchone()[0]


def _identity(path):
    """(device, inode) of the file at ``path``, None if there is none."""
    with contextlib.suppress(OSError):
        status = os.stat(path)
        return status.st_dev, status.st_ino


def _item_cells(item_id, raw, cells):
    """An items row's cells, {feature field: text}; None for a row that is not one (another program wrote it)."""
    with contextlib.suppress(TypeError, ValueError):
        value = json.loads(cells)
        if isinstance(value, dict) and _all_text(item_id, *value, *value.values()):
            return value


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def default_store_path(model_path):
    """The store's default file: beside the artifact, ``MODEL.fbsm.store.sqlite``."""
    return f"{model_path}.store.sqlite"


def on_postgres(location):
    """Whether ``location`` names a PostgreSQL server rather than a SQLite file."""
    return location.startswith(("postgresql://", "postgres://"))


def open_store(location):
    """A ``PostgresStore`` for a ``postgresql://`` (or ``postgres://``) URL, else a ``SqliteStore`` file."""
    location = str(location)
    return PostgresStore(location) if on_postgres(location) else SqliteStore(location)


def describe(location):
    """The store for a log line or /health: a file's name, a server URL without its password."""
    location = str(location)  # a server URL's password replaced by ***
    return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", location) if on_postgres(location) else os.path.basename(location)
