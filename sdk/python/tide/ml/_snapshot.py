"""Packing a code folder or a local input as the tide CLI does: a tar.gz
named by its SHA-256, leaving out what .amlignore (or, in a folder without
one, .gitignore) matches, and .git. The archive depends only on names,
modes and contents, so the same folder uploads once."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
import tempfile
from typing import List, Optional, Tuple

IGNORE_FILES = (".amlignore", ".gitignore")


class _Rule:
    def __init__(self, regex: "re.Pattern[str]", negate: bool, dir_only: bool) -> None:
        self.regex, self.negate, self.dir_only = regex, negate, dir_only


def _pattern(p: str, anchored: bool) -> str:
    out = ["^"] if anchored else ["^(?:.*/)?"]
    i = 0
    while i < len(p):
        c = p[i]
        if c == "*" and p.startswith("**", i):
            at_start = i == 0 or p[i - 1] == "/"
            rest = p[i + 2:]
            if at_start and rest.startswith("/"):
                out.append("(?:.*/)?")
                i += 3
                continue
            if at_start and rest == "":
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = p.find("]", i + 1)
            if j < 0:
                out.append(r"\[")
            else:
                cls = p[i + 1:j]
                if cls.startswith("!"):
                    cls = "^" + cls[1:]
                out.append("[" + cls.replace("\\", "\\\\") + "]")
                i = j
        elif c == "\\" and i + 1 < len(p):
            i += 1
            out.append(re.escape(p[i]))
        else:
            out.append(re.escape(c))
        i += 1
    out.append("$")
    return "".join(out)


def _parse_ignore(text: str) -> List[_Rule]:
    rules = []
    for line in text.splitlines():
        line = line.rstrip("\r")
        line = line[:-2].rstrip(" ") + "\\ " if line.endswith("\\ ") else line.rstrip(" \t")
        if not line or line.startswith("#"):
            continue
        negate = False
        if line.startswith("!"):
            negate, line = True, line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/") if line.startswith("/") else line
        try:
            rules.append(_Rule(re.compile(_pattern(line, anchored)), negate, dir_only))
        except re.error:
            continue
    return rules


def _ignored(sets: List[Tuple[str, List[_Rule]]], rel: str, is_dir: bool) -> bool:
    out = False
    for base, rules in sets:
        p = rel
        if base:
            if not rel.startswith(base + "/"):
                continue
            p = rel[len(base) + 1:]
        for r in rules:
            if r.dir_only and not is_dir:
                continue
            if r.regex.match(p):
                out = not r.negate
    return out


class Snapshot:
    """A packed folder or file: its tar.gz bytes on disk and their SHA-256."""

    def __init__(self, path: str, digest: str, size: int, files: int) -> None:
        self.path, self.digest, self.size, self.files = path, digest, size, files

    def remove(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass


def pack(src: str) -> Snapshot:
    """Packs src (a folder or one file) into a temporary tar.gz."""
    fd, tmp = tempfile.mkstemp(prefix="tide-snapshot-", suffix=".tar.gz")
    os.close(fd)
    files = 0
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                if os.path.isdir(src):
                    files = _add_folder(tar, src, "", [])
                else:
                    _add_file(tar, src, os.path.basename(src))
                    files = 1
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return Snapshot(tmp, h.hexdigest(), os.path.getsize(tmp), files)


def _add_folder(tar: tarfile.TarFile, folder: str, rel: str,
                sets: List[Tuple[str, List[_Rule]]]) -> int:
    for name in IGNORE_FILES:
        p = os.path.join(folder, name)
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                sets = sets + [(rel, _parse_ignore(f.read()))]
            break
    count = 0
    for entry in sorted(os.listdir(folder)):
        full = os.path.join(folder, entry)
        child = entry if not rel else rel + "/" + entry
        is_dir = os.path.isdir(full) and not os.path.islink(full)
        if is_dir and entry == ".git":
            continue
        if _ignored(sets, child, is_dir):
            continue
        if is_dir:
            _header(tar, child + "/", tarfile.DIRTYPE, 0o755)
            count += _add_folder(tar, full, child, sets)
        else:
            _add_file(tar, full, child, root=folder)
            count += 1
    return count


def _add_file(tar: tarfile.TarFile, full: str, rel: str, root: Optional[str] = None) -> None:
    if os.path.islink(full):
        target = os.readlink(full)
        _header(tar, rel, tarfile.SYMTYPE, 0o777, linkname=target)
        return
    if not os.path.isfile(full):
        return
    mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
    size = os.path.getsize(full)
    with open(full, "rb") as f:
        _header(tar, rel, tarfile.REGTYPE, mode, size=size, fileobj=f)


def _header(tar: tarfile.TarFile, name: str, kind: bytes, mode: int, size: int = 0,
            linkname: str = "", fileobj: Optional[io.BufferedReader] = None) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, linkname
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    tar.addfile(info, fileobj)
