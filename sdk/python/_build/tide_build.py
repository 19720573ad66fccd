"""A PEP 517 build backend in the standard library only, so
``pip install ./sdk/python`` works offline: pip needs nothing from an index
to build this package (a setuptools backend would make pip fetch setuptools
into an isolated build environment)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "tide_sdk"
DIST = "tide-sdk"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _version() -> str:
    with open(os.path.join(ROOT, "tide", "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip('"')
    raise RuntimeError("no __version__ in tide/__init__.py")


def _metadata() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Python SDK for tide, shaped like "
            "azure-ai-ml's MLClient\nRequires-Python: >=3.9\nLicense: Apache-2.0\n"
            "Description-Content-Type: text/markdown\n\n%s" % (DIST, _version(), readme))


def _package_files():
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "tide")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".py", ".typed")):
                full = os.path.join(dirpath, fn)
                yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _wheel(wheel_directory: str, editable: bool = False) -> str:
    version = _version()
    dist_info = "%s-%s.dist-info" % (NAME, version)
    wheel_name = "%s-%s-py3-none-any.whl" % (NAME, version)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as zf:
        def add(name: str, data: bytes) -> None:
            zf.writestr(name, data)
            records.append(_record_line(name, data))

        if editable:
            add("tide_sdk_editable.pth", (ROOT + "\n").encode())
        else:
            for full, rel in _package_files():
                with open(full, "rb") as f:
                    add(rel, f.read())
        add(dist_info + "/METADATA", _metadata().encode())
        add(dist_info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: tide_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        add(dist_info + "/top_level.txt", b"tide\n")
        records.append(dist_info + "/RECORD,,")
        zf.writestr(dist_info + "/RECORD", "\n".join(records) + "\n")
    return wheel_name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tf:
        for rel in ("pyproject.toml", "README.md", "_build/tide_build.py"):
            tf.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        for full, rel in _package_files():
            tf.add(full, arcname=base + "/" + rel)
        data = _metadata().encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []
