"""A throwaway PostgreSQL cluster for the tests and the benchmark: initdb into a temporary
directory, listening on a free 127.0.0.1 port only, stopped (and deleted) at the end.

PostgreSQL refuses to run as root, so under root the server runs as the ``postgres``
user (or ``nobody``) through ``runuser``, owning its temporary directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import uuid

__all__ = ["Cluster", "binaries", "create_schema", "drop_schema", "free_port", "schema_url"]

_SEARCH = ("/usr/local/bin", "/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
           "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/14/bin")


def binaries() -> dict[str, str] | None:
    """Paths of ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed."""
    found: dict[str, str] = {}
    for name in ("initdb", "pg_ctl"):
        path = shutil.which(name) or next(
            (os.path.join(d, name) for d in _SEARCH if os.access(os.path.join(d, name), os.X_OK)), None)
        if path is None:
            return None
        found[name] = path
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_as() -> list[str]:
    """The command prefix that runs a PostgreSQL program as an unprivileged user."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--"]
    raise RuntimeError("running as root and no unprivileged user to run PostgreSQL as")


def schema_url(url: str, schema: str) -> str:
    """``url`` with its connections' ``search_path`` set to ``schema`` (and named after it,
    so the connections a test left open can be ended when it is over)."""
    option = urllib.parse.quote(f"-csearch_path={schema}")
    return f"{url}{'&' if '?' in url else '?'}options={option}&application_name={schema}"


class Cluster:
    """One PostgreSQL server in a temporary directory (:meth:`start`, :meth:`stop`)."""

    def __init__(self, root: str, port: int, pg_ctl: str, prefix: list[str]) -> None:
        self.root = root
        self.port = port
        self.data = os.path.join(root, "data")
        self._pg_ctl = pg_ctl
        self._prefix = prefix
        self.url = f"postgresql://svit@127.0.0.1:{port}/postgres"

    @classmethod
    def start(cls) -> Cluster:
        found = binaries()
        if found is None:
            raise RuntimeError("PostgreSQL binaries (initdb, pg_ctl) not found")
        prefix = _run_as()
        root = tempfile.mkdtemp(prefix="svit-pg-")
        if prefix:
            user = prefix[2]
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        data = os.path.join(root, "data")
        subprocess.run([*prefix, found["initdb"], "-D", data, "-U", "svit", "--auth=trust", "-E", "UTF8",
                        "--no-sync", "--no-instructions"], check=True, capture_output=True, timeout=120)
        last = ""
        for _attempt in range(5):
            port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={data} "
                       "-c max_connections=200 -c shared_buffers=32MB")
            started = subprocess.run(
                [*prefix, found["pg_ctl"], "-D", data, "-o", options, "-l", os.path.join(root, "server.log"),
                 "-w", "-t", "60", "start"], capture_output=True, text=True, timeout=90)
            if started.returncode == 0:
                return cls(root, port, found["pg_ctl"], prefix)
            last = started.stdout + started.stderr
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {last[-500:]}")

    def stop(self) -> None:
        subprocess.run([*self._prefix, self._pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def create_schema(base: str) -> tuple[str, str]:
    """A fresh empty schema on the server at ``base``: ``(schema name, URL whose connections use it)``."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(base, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema, schema_url(base, schema)


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it (after a test)."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", [schema])
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except psycopg.Error:
        pass  # a test that stopped the server leaves its schema to the cluster's deletion
