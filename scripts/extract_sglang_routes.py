"""Extract the HTTP routes an SGLang release serves, from its wheel.

    python scripts/extract_sglang_routes.py OUT.json VERSION=WHEEL [VERSION=WHEEL ...]

Reads, without importing anything of SGLang: every `@app.<method>(path)` and `@app.api_route(path,
methods=[...])` decorator of the HTTP server (`sglang/srt/entrypoints/http_server.py`), the
`@router.<method>(path)` ones of the routers it includes (`app.include_router(...)` of a router
imported from another module, e.g. `/v1/loads`), and the `Mount(path, ...)` calls of
`sglang/srt/utils/common.py` (the Prometheus `/metrics` app, mounted with `--enable-metrics`). OUT.json: `{version: {path: {"methods": [...], "at": "file:line"}}}` plus the
wheel each version was read from. Read by tests/unit/test_sglang_routes.py.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

_VERBS = {"get": "GET", "post": "POST", "put": "PUT", "delete": "DELETE", "patch": "PATCH"}


def _routes(path: str, text: str, *, mounts_only: bool = False) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
            continue
        route = first.value
        func = node.func
        methods: list[str] | None = None
        if mounts_only:
            if isinstance(func, ast.Name) and func.id == "Mount":
                methods = ["GET"]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in ("app", "router") and func.attr in _VERBS:
                methods = [_VERBS[func.attr]]
            elif func.value.id in ("app", "router") and func.attr == "api_route":
                methods = ["GET"]
                for kw in node.keywords:
                    if kw.arg == "methods" and isinstance(kw.value, (ast.List, ast.Tuple)):
                        methods = [
                            str(e.value) for e in kw.value.elts if isinstance(e, ast.Constant)
                        ]
        if methods is None or not route.startswith("/"):
            continue
        entry = out.setdefault(route, {"methods": [], "at": f"{path}:{node.lineno}"})
        entry["methods"] = sorted(set(entry["methods"]) | set(methods))  # type: ignore[arg-type]
    return out


_SERVER = "sglang/srt/entrypoints/http_server.py"
_MOUNTS = "sglang/srt/utils/common.py"


def _included_modules(text: str) -> list[str]:
    """The files of the routers the server includes: `from M import router as R` and
    `app.include_router(R)`."""
    tree = ast.parse(text)
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
    out: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "include_router"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in imported
        ):
            out.append(imported[node.args[0].id].replace(".", "/") + ".py")
    return out


def extract(wheel: str) -> dict[str, dict[str, object]]:
    routes: dict[str, dict[str, object]] = {}
    with zipfile.ZipFile(wheel) as zf:
        server = zf.read(_SERVER).decode("utf-8", "replace")
        files = [_SERVER, *_included_modules(server), _MOUNTS]
        for name in files:
            text = zf.read(name).decode("utf-8", "replace")
            for route, entry in _routes(name, text, mounts_only=name == _MOUNTS).items():
                routes.setdefault(route, entry)
    return dict(sorted(routes.items()))


def main(argv: list[str]) -> None:
    out: dict[str, object] = {}
    for spec in argv[1:]:
        version, _, wheel = spec.partition("=")
        out[version] = {"wheel": Path(wheel).name, "routes": extract(wheel)}
    Path(argv[0]).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
