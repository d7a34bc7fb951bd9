"""Several RabbitMQ nodes in one ``broker_url``: the nodes of a cluster, tried in order.

Celery's spelling is kept: the URLs of the nodes joined by ``;``
(``amqp://h1:5672//;amqp://h2:5672//``), or a list in ``broker_url`` (which the app joins
the same way). The link (:mod:`.io`) connects to the first node that answers, and when the
connection is lost it tries the next one, round the list; after every (re)connect it
re-declares what it uses and restarts its consumers, so a worker carries on against
another node of the cluster.

The nodes are one broker, so they must agree on what a connection sees:

* the vhost: queues live in a vhost, and a node reached in another vhost would hold none
  of them;
* the user: a cluster shares its users and permissions, and the URL list is one broker's
  identity in logs and in the delay cascade's key;
* the scheme: ``amqp://`` and ``amqps://`` aren't mixed, so a failover can't drop TLS.

A URL that leaves out the user (``amqp://h2//``) or the vhost (``amqp://h2``) takes the
first URL's; one that gives a different value is refused with the URLs' positions named.
Other parts (host, port, query options such as ``heartbeat``) are per node.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from potatoq.exceptions import ImproperlyConfigured
from potatoq.utils import mask_url

__all__ = ["split_nodes"]


def split_nodes(url: str) -> list[str]:
    """The URL of each node in ``url`` (one or more AMQP URLs joined by ``;``), each one
    complete: the user and vhost the first URL gives are filled into URLs that leave them
    out. Raises :class:`ImproperlyConfigured` when the URLs disagree (see the module doc)."""
    parts = [part.strip() for part in url.split(";")]
    parts = [part for part in parts if part]
    if not parts:
        raise ImproperlyConfigured(f"the RabbitMQ broker_url {mask_url(url)!r} names no node")
    if len(parts) == 1:
        return parts
    first = urlsplit(parts[0])
    nodes = [parts[0]]
    for position, part in enumerate(parts[1:], start=2):
        where = f"URL {position} of broker_url ({mask_url(part)!r})"
        if "://" not in part:
            raise ImproperlyConfigured(
                f"{where} is not a URL: each node is a whole URL, e.g. amqp://guest:guest@host2:5672//"
            )
        this = urlsplit(part)
        if this.scheme.lower() != first.scheme.lower():
            raise ImproperlyConfigured(
                f"{where} is {this.scheme}:// but URL 1 is {first.scheme}://: the nodes of one "
                "broker use the same scheme (a failover must not drop or add TLS)"
            )
        netloc = this.netloc
        if this.username is None:
            userinfo = first.netloc.rpartition("@")[0]
            netloc = f"{userinfo}@{netloc}" if userinfo else netloc
        elif (unquote(this.username), unquote(this.password or "")) != (
            unquote(first.username or ""),
            unquote(first.password or ""),
        ):
            raise ImproperlyConfigured(
                f"{where} logs in as {unquote(this.username)!r} (or with another password) but URL 1 as "
                f"{unquote(first.username or 'guest')!r}: the nodes of a RabbitMQ cluster share their "
                "users, so give every URL the same credentials (or leave them out after the first)"
            )
        path = this.path
        if path in ("", "/"):
            path = first.path
        elif _vhost(path) != _vhost(first.path):
            raise ImproperlyConfigured(
                f"{where} names vhost {_vhost(path)!r} but URL 1 vhost {_vhost(first.path)!r}: the queues "
                "live in one vhost, so every node's URL must name the same one (or none after the first)"
            )
        nodes.append(urlunsplit(this._replace(netloc=netloc, path=path)))
    return nodes


def _vhost(path: str) -> str:
    """The vhost pika reads from a URL path (``""`` and ``"/"`` are the default, ``/``)."""
    if len(path) <= 1:
        return "/"
    return unquote(path.split("/")[1])
