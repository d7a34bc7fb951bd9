"""Say which server answers at a URL: ``probe.py URL`` prints ``PRODUCT VERSION``.

Used by the service scripts to decide whether a port already holds a server the tests can
use (then it is reused, not started again) or something else (then they refuse to start).
Standard library only: it runs before any virtualenv exists.

Exit status: 0 the server answered (stdout ``RabbitMQ 4.0.5``, ``Valkey 8.1.1``,
``Redis 7.0.15``, ``PostgreSQL 15.14``); 1 nothing accepts connections there; 2 something
answers but not as a usable server of that kind (the reason is on stderr).
"""

from __future__ import annotations

import getpass
import socket
import struct
import sys
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

TIMEOUT = 3.0


class Unusable(Exception):
    """Something listens, but it is not a server of the URL's kind that the tests can use."""


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise Unusable(f"the connection closed after {len(data)} of {size} expected bytes")
        data += chunk
    return data


# --- AMQP 0-9-1: the server's Connection.Start names its product and version ---------------

# Field value types of an AMQP table, by their size in bytes (None: a 4-byte length follows).
_AMQP_FIXED = {"t": 1, "b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "f": 4, "l": 8, "L": 8, "d": 8}
_AMQP_FIXED.update({"T": 8, "D": 5, "V": 0})


def _amqp_table(data: bytes) -> dict[str, bytes]:
    """The string entries of a field table (others are skipped over)."""
    entries, at = {}, 0
    while at < len(data):
        name_len = data[at]
        name = data[at + 1 : at + 1 + name_len].decode("utf-8", "replace")
        kind = chr(data[at + 1 + name_len])
        at += 2 + name_len
        if kind in _AMQP_FIXED:
            at += _AMQP_FIXED[kind]
        elif kind in "SFAx":
            (size,) = struct.unpack_from(">I", data, at)
            if kind == "S":
                entries[name] = data[at + 4 : at + 4 + size]
            at += 4 + size
        else:
            raise Unusable(f"unknown AMQP field type {kind!r} in Connection.Start")
    return entries


def probe_amqp(sock: socket.socket, _url: str) -> str:
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    header = _read_exactly(sock, 7)
    if header[:4] == b"AMQP":
        raise Unusable("it answered with a protocol header: not AMQP 0-9-1")
    kind, _channel, size = struct.unpack(">BHI", header)
    if size > 1 << 20:
        raise Unusable(f"not AMQP 0-9-1: its first frame would be {size} bytes long")
    payload = _read_exactly(sock, size + 1)[:-1]
    class_id, method_id = struct.unpack_from(">HH", payload, 0)
    if kind != 1 or (class_id, method_id) != (10, 10):
        raise Unusable(
            f"the first frame is not Connection.Start (type {kind}, method {class_id}.{method_id})"
        )
    (table_size,) = struct.unpack_from(">I", payload, 6)
    props = _amqp_table(payload[10 : 10 + table_size])
    product = props.get("product", b"?").decode("utf-8", "replace").split()[0]
    return f"{product} {props.get('version', b'?').decode('utf-8', 'replace')}"


# --- Redis protocol: INFO server names Redis or Valkey and the version ----------------------


def probe_redis(sock: socket.socket, _url: str) -> str:
    sock.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
    first = b""
    while not first.endswith(b"\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise Unusable("the connection closed before an INFO reply")
        first += byte
        if len(first) > 512:
            raise Unusable("the reply to INFO is not RESP")
    if first.startswith(b"-"):
        raise Unusable(f"INFO was refused: {first.decode('utf-8', 'replace').strip()}")
    if not first.startswith(b"$"):
        raise Unusable(f"the reply to INFO is not RESP: {first[:40]!r}")
    body = _read_exactly(sock, int(first[1:-2]) + 2).decode("utf-8", "replace")
    info = dict(line.split(":", 1) for line in body.splitlines() if ":" in line)
    if info.get("server_name") == "valkey" or "valkey_version" in info:
        return f"Valkey {info.get('valkey_version', '?')}"
    return f"Redis {info.get('redis_version', '?')}"


# --- PostgreSQL: a startup message as the URL's user; only a password-less login counts -----


def _pg_messages(sock: socket.socket) -> tuple[str, bytes]:
    kind = _read_exactly(sock, 1).decode("ascii", "replace")
    (size,) = struct.unpack(">I", _read_exactly(sock, 4))
    return kind, _read_exactly(sock, size - 4)


def probe_postgres(sock: socket.socket, url: str) -> str:
    parts = urlsplit(url)
    user = unquote(parts.username or "") or getpass.getuser()
    database = unquote(parts.path.lstrip("/")) or user
    params = b"".join(k + b"\0" + v.encode() + b"\0" for k, v in ((b"user", user), (b"database", database)))
    body = struct.pack(">I", 196608) + params + b"\0"
    sock.sendall(struct.pack(">I", len(body) + 4) + body)
    version = "?"
    while True:
        kind, data = _pg_messages(sock)
        if kind == "E":
            fields = {f[:1]: f[1:] for f in data.split(b"\0") if f}
            message = fields.get(b"M", b"?").decode("utf-8", "replace")
            raise Unusable(f"login as {user!r} to database {database!r} failed: {message}")
        if kind == "R":
            (code,) = struct.unpack_from(">I", data)
            if code != 0:
                raise Unusable(f"login as {user!r} asks for a password (authentication method {code})")
        elif kind == "S":
            name, value = data.split(b"\0")[:2]
            if name == b"server_version":
                version = value.decode().split()[0]
        elif kind == "Z":
            sock.sendall(b"X\0\0\0\4")
            return f"PostgreSQL {version}"
        elif kind not in "KN":
            raise Unusable(f"unexpected PostgreSQL message {kind!r} during login")


PROBES: dict[str, Callable[[socket.socket, str], str]] = {
    "amqp": probe_amqp,
    "redis": probe_redis,
    "postgresql": probe_postgres,
    "postgres": probe_postgres,
}
DEFAULT_PORTS = {"amqp": 5672, "redis": 6379, "postgresql": 5432, "postgres": 5432}


def probe(url: str) -> str:
    """``PRODUCT VERSION`` of the server at ``url``; ConnectionError when nothing listens."""
    parts = urlsplit(url)
    if parts.scheme not in PROBES:
        raise ValueError(f"can't probe {url!r}: the scheme must be one of {', '.join(sorted(PROBES))}")
    host, port = parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS[parts.scheme]
    try:
        sock = socket.create_connection((host, port), timeout=TIMEOUT)
    except OSError as exc:
        raise ConnectionError(f"nothing accepts connections on {host}:{port} ({exc})") from exc
    try:
        with sock:
            return PROBES[parts.scheme](sock, url)
    except Unusable as exc:
        raise Unusable(f"{host}:{port}: {exc}") from exc
    except (OSError, struct.error, IndexError, ValueError) as exc:
        raise Unusable(f"{host}:{port} answered, but not as {parts.scheme}: {exc}") from exc


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: probe.py URL   (amqp://, redis://, postgresql://)", file=sys.stderr)
        return 64
    try:
        print(probe(argv[0]))
    except ConnectionError as exc:
        print(exc, file=sys.stderr)
        return 1
    except Unusable as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
