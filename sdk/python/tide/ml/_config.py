"""Reading the tide CLI's configuration, so MLClient.from_config() reaches
the same server, with the same token and workspace, as ``tide`` does."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional


def default_config_path() -> str:
    """$XDG_CONFIG_HOME/tide/config.json, else ~/.config/tide/config.json."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "tide", "config.json")


def load(path: Optional[str] = None, context: Optional[str] = None) -> Dict[str, Any]:
    """Returns server, token and workspace (and any TLS settings) from the
    config file, with TIDE_SERVER, TIDE_TOKEN, TIDE_WORKSPACE and
    TIDE_CONTEXT taking precedence as they do for the CLI."""
    path = path or os.environ.get("TIDE_CONFIG") or default_config_path()
    cfg: Dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    entry = _context(cfg, context or os.environ.get("TIDE_CONTEXT"))
    out = dict(entry)
    for key, env in (("server", "TIDE_SERVER"), ("token", "TIDE_TOKEN"), ("workspace", "TIDE_WORKSPACE")):
        if os.environ.get(env):
            out[key] = os.environ[env]
    if not out.get("server") or not out.get("token"):
        raise ValueError("no tide server configured in %s: start one with 'tide server', "
                         "or set TIDE_SERVER and TIDE_TOKEN" % path)
    return out


def _context(cfg: Dict[str, Any], name: Optional[str]) -> Dict[str, Any]:
    """A config holds either one server (server, token, workspace) or named
    contexts, kubectl style, with the current one named."""
    contexts = cfg.get("contexts")
    if not contexts:
        return cfg
    if isinstance(contexts, list):
        contexts = {c.get("name", ""): c for c in contexts}
    name = name or cfg.get("current_context") or cfg.get("current-context") or ""
    if name not in contexts:
        raise ValueError("tide context %r not found; contexts: %s" % (name, ", ".join(sorted(contexts))))
    entry = dict(contexts[name])
    entry.update(entry.pop("context", {}) or {})
    return entry
