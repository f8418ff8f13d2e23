"""A throwaway PostgreSQL server for the store tests: initdb into a temporary folder, pg_ctl start on
127.0.0.1 and a free port (as the ``postgres`` user when run as root, which initdb refuses), stopped and
removed at the end. ``start()`` returns None with the reason when the machine cannot run one."""

import glob
import os
import shutil
import subprocess
import tempfile

from recbole_fbsm.runtime.distributed import free_port


def _binary(name):
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


class PostgresServer:
    def __init__(self, folder, port, as_user):
        self.folder, self.port, self.as_user = folder, port, as_user
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._databases = 0

    def _run(self, command):
        if self.as_user:
            command = ["runuser", "-u", self.as_user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    def new_database(self):
        """The URL of a fresh, empty database on this server."""
        import psycopg

        self._databases += 1
        name = f"store_test_{self._databases}"
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self):
        self._run([_binary("pg_ctl"), "-D", os.path.join(self.folder, "data"), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.folder, ignore_errors=True)


def start():
    """(server, None) or (None, why not)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, "psycopg is not installed (pip install -e '.[test]')"
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not initdb or not pg_ctl:
        return None, "PostgreSQL's initdb/pg_ctl not found (Debian: apt-get install postgresql; .ci/install-postgresql)"
    as_user = None
    folder = tempfile.mkdtemp(prefix="store-pg-")
    if os.geteuid() == 0:  # initdb refuses root
        as_user = "postgres"
        try:
            shutil.chown(folder, user=as_user)
        except (LookupError, OSError) as error:
            shutil.rmtree(folder, ignore_errors=True)
            return None, f"running as root and cannot hand a folder to user postgres: {error}"
    server = PostgresServer(folder, free_port(), as_user)
    data = os.path.join(folder, "data")
    steps = [
        [initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"],
        [
            pg_ctl,
            "-D",
            data,
            "-l",
            os.path.join(folder, "log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {server.port} -k {folder} -c listen_addresses=127.0.0.1",
            "start",
        ],
    ]
    for step in steps:
        try:
            done = server._run(step)
        except (OSError, subprocess.TimeoutExpired) as error:
            done = None
            reason = str(error)
        else:
            reason = (done.stderr or done.stdout).strip().splitlines()[-1:] if done.returncode else None
        if done is None or done.returncode:
            shutil.rmtree(folder, ignore_errors=True)
            return None, f"cannot start PostgreSQL ({os.path.basename(step[0])}: {reason})"
    return server, None
