"""The Redis broker's Lua scripts, read from ``lua/*.lua`` once per process.

Each script is sent as the part of ``lua/_lib.lua`` it needs followed by its body, so a
helper is written once and every script still runs as one self-contained ``EVALSHA``."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Sequence

from potatoq.utils.package_files import files as package_files


@dataclasses.dataclass(frozen=True)
class Script:
    name: str
    source: str  # the helpers of _lib.lua the body needs, then the body: what the server runs
    sha: str
    body: str  # the transition's own file, starting with its KEYS/ARGV header


@dataclasses.dataclass(frozen=True)
class _Helper:
    """One top-level ``local`` statement of ``_lib.lua`` with the comment lines above it."""

    names: frozenset[str]  # what it defines
    uses: frozenset[str]  # every identifier in its code (comments and strings stripped)
    text: str


_LUA_STRING_OR_COMMENT = re.compile(r"--[^\n]*|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_LUA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LUA_LOCAL = re.compile(r"local\s+(?:function\s+([A-Za-z_]\w*)|([A-Za-z_][\w\s,]*?)\s*=)")
# Settle outcome kinds: settle_and_claim.lua is built once per kind, so each variant's
# source holds only the helpers that kind needs (the "complete" one runs for most tasks).
SETTLE_KINDS = ("complete", "dead", "retry", "requeue")
# Under the cluster layout these run in a result's slot, with _lib.lua's write_result.
RESULT_SLOT_SCRIPTS = frozenset({"result_store", "result_store_fenced", "cluster_result"})


def _identifiers(code: str) -> frozenset[str]:
    return frozenset(_LUA_NAME.findall(_LUA_STRING_OR_COMMENT.sub(" ", code)))


def _parse_lib(lib: str) -> tuple[str, list[_Helper]]:
    """Split ``_lib.lua`` into its header comment and its helpers, in file order.

    A helper starts at a column-0 ``local`` line, together with the comment lines right
    above it, and runs until the next such start. Every script pays, on every call, for
    creating each helper closure its source defines, so the loader includes only the
    helpers a body needs (see :func:`_source`).
    """
    lines = lib.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("local ")]
    if not starts:
        return lib, []
    cuts = []
    for start in starts:
        cut = start
        while cut > 0 and lines[cut - 1].startswith("--"):
            cut -= 1
        cuts.append(cut)
    header = "".join(lines[: cuts[0]])
    helpers = []
    for n, cut in enumerate(cuts):
        text = "".join(lines[cut : cuts[n + 1] if n + 1 < len(cuts) else len(lines)])
        match = _LUA_LOCAL.match(lines[starts[n]])
        if match is None:
            raise ValueError(f"_lib.lua: can't read the names defined by {lines[starts[n]].strip()!r}")
        names = match.group(1) or match.group(2)
        helpers.append(_Helper(frozenset(x.strip() for x in names.split(",")), _identifiers(text), text))
    return header, helpers


def _source(header: str, helpers: Sequence[_Helper], body: str) -> str:
    """``header`` + the helpers ``body`` uses, directly or through other helpers, in file order."""
    needed: set[int] = set()  # indexes into helpers
    wanted = set(_identifiers(body))
    while True:
        more = {i for i, h in enumerate(helpers) if i not in needed and h.names & wanted}
        if not more:
            break
        needed |= more
        for i in more:
            wanted |= helpers[i].uses
    return header + "".join(h.text for i, h in enumerate(helpers) if i in needed) + "\n" + body


def _with_overrides(helpers: list[_Helper], overrides: list[_Helper]) -> list[_Helper]:
    """``helpers`` with each helper of ``overrides`` in place of the one defining the same
    names; the overrides that replace nothing go right before the first one that does."""
    by_names = {h.names: h for h in overrides}
    replaced = [h for h in helpers if h.names in by_names]
    added = [h for h in overrides if h.names not in {r.names for r in replaced}]
    out: list[_Helper] = []
    for helper in helpers:
        if helper.names in by_names:
            out += added
            added = []
        out.append(by_names.get(helper.names, helper))
    return out


def _load_scripts(cluster: bool = False) -> dict[str, Script]:
    """Read every ``lua/*.lua`` once; each script is the part of ``_lib.lua`` it needs
    followed by its body. ``settle_and_claim`` becomes ``settle_and_claim.<kind>``, one per
    outcome kind, with ``settle_KIND`` in its body replaced by ``settle_<kind>``. With
    ``cluster``, the helpers of ``_cluster.lua`` replace those of the same name (the cluster
    layout: cluster.py)."""
    folder = package_files("potatoq.brokers.redis").joinpath("lua")
    header, helpers = _parse_lib(folder.joinpath("_lib.lua").read_text(encoding="utf-8"))
    plain = helpers
    if cluster:
        _, overrides = _parse_lib(folder.joinpath("_cluster.lua").read_text(encoding="utf-8"))
        helpers = _with_overrides(helpers, overrides)
    bodies = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".lua") and not entry.name.startswith("_"):
            name = entry.name[: -len(".lua")]
            body = entry.read_text(encoding="utf-8")
            if "settle_KIND" in body:
                for kind in SETTLE_KINDS:
                    variant = body.replace("settle_KIND", f"settle_{kind}")
                    bodies[f"{name}.{kind}"] = variant.replace("@KIND@", kind)
            else:
                bodies[name] = body
    scripts = {}
    for name, body in bodies.items():
        # the scripts that run in a result's own slot write it there (no outbox)
        source = _source(header, plain if name in RESULT_SLOT_SCRIPTS else helpers, body)
        scripts[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest(), body)
    return scripts


SCRIPTS = _load_scripts()


@functools.cache
def cluster_scripts() -> dict[str, Script]:
    """The same scripts for the cluster layout (cluster.py), with ``_cluster.lua``'s helpers:
    built on first use, so a standalone broker's processes never pay for them."""
    return _load_scripts(cluster=True)
