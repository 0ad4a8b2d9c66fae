"""Extract the real (file, function) pairs that the stage tables can name, from the real trees.

    python scripts/extract_layout_functions.py OUT_DIR SOURCE [SOURCE ...]

Each SOURCE is `NAME=KIND:LOCATION`:
- `git:REPO_DIR@COMMIT[#STRIP]` a bare or work-tree git repository at a commit (`git ls-tree` +
  `git show`; e.g. a snapshot brought by the search tool's `fetch`), its paths read without the
  leading folder STRIP (`src/` of Megatron-Bridge, whose package is `src/megatron/bridge/`),
- `wheel:PATH.whl` a wheel (read as a zip),
- `dir:PATH#PREFIX` an installed package's parent folder (site-packages): the files under it
  whose path starts with PREFIX (`torch/distributed/`).
- `stored:PATH@OWNER/NAME@COMMIT` the files under PATH, written out unchanged from the stored
  versions of that repository at that commit that the search tool's `read_file` gives (a commit
  that no `fetch` snapshot holds, e.g. slime's open work): the tree names them by repository and
  commit.
`PREFIXES` (below) limits a source to the folders the tables can point at.

For each source, OUT_DIR/NAME.json.gz holds `{"source": ..., "files": {path: [qualname, ...]},
"bases": {class: [base class, ...]}}`:
every `.py` file under the source's prefixes, with the qualified names (`Class.method`,
`outer.<locals>.inner`, as `__qualname__` and py-spy on Python >= 3.11 print them) of the functions
whose last name a stage table mentions (`analysis/signatures/`; a row with a wildcard function
needs only the file). tests/unit/test_signature_layouts.py checks every row of the tables against
these lists: a row that names nothing real fails it. Regenerate after a table change with the same
sources (tests/fixtures/layouts/README.md lists the ones used).
"""

from __future__ import annotations

import ast
import gzip
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from slime_hangdoctor.analysis.signatures import ANY, LAYOUTS, split_name
from slime_hangdoctor.topology import SLIME_ACTORS

# The folders of each tree the tables can point at (a path is kept when it starts with one).
PREFIXES = (
    "slime/",
    "miles/",
    "train.py",
    "train_async.py",
    "megatron/",
    "sglang/srt/",
    "torch/distributed/",
    "sympy/",
    "math_verify/",
    "latex2sympy2",
)


def table_functions() -> frozenset[str]:
    """Every function name (the last part) that a frame or method row of any layout names."""
    names: set[str] = set()
    for layout in LAYOUTS.values():
        names.update(s.func for s in layout.frames if s.func != ANY)
        names.update(m.method for m in layout.methods)
    return frozenset(names)


def table_classes() -> frozenset[str]:
    """Every class that a frame or method row of any layout, or the slime actor table, names."""
    names: set[str] = {a.cls for a in SLIME_ACTORS}
    for layout in LAYOUTS.values():
        names.update(s.cls for s in layout.frames if s.cls is not None)
        names.update(m.cls for m in layout.methods)
    return frozenset(names)


def qualnames(source: str) -> tuple[list[str], dict[str, list[str]]]:
    """The qualified names of the functions of one module's text, and each class's base classes
    by their last name (`class MegatronTrainRayActor(TrainRayActor)`: Ray titles an inherited
    method with the actor's own class). A syntax error gives nothing."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [], {}
    out: list[str] = []
    bases: dict[str, list[str]] = {}

    def base_name(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        return None

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append(name)
                walk(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                names = [n for b in child.bases if (n := base_name(b)) is not None]
                if names:
                    bases[f"{prefix}{child.name}"] = names
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out, bases


def _kept(path: str) -> bool:
    return path.endswith(".py") and path.startswith(PREFIXES)


def _git_files(repo: str, commit: str, strip: str) -> Iterator[tuple[str, str]]:
    listing = subprocess.run(
        ["git", "-C", repo, "ls-tree", "-r", "--name-only", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    for path in listing:
        rel = path.removeprefix(strip)
        if (not strip or path.startswith(strip)) and _kept(rel):
            text = subprocess.run(
                ["git", "-C", repo, "show", f"{commit}:{path}"],
                check=True,
                capture_output=True,
            ).stdout.decode("utf-8", "replace")
            yield rel, text


def _wheel_files(wheel: str) -> Iterator[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as zf:
        for path in zf.namelist():
            if _kept(path):
                yield path, zf.read(path).decode("utf-8", "replace")


def _dir_files(root: str, prefix: str) -> Iterator[tuple[str, str]]:
    base = Path(root)
    for file in sorted((base / prefix.rstrip("/")).parent.rglob("*.py")):
        path = file.relative_to(base).as_posix()
        if path.startswith(prefix) and _kept(path):
            yield path, file.read_text("utf-8", "replace")


def _repo_name(repo: str) -> str:
    """`owner/name` of a snapshot the search tool's fetch brought (`.../owner+name/repo`)."""
    parent = Path(repo).resolve().parent.name
    return parent.replace("+", "/", 1) if "+" in parent else str(Path(repo).resolve())


def extract(spec: str, wanted: frozenset[str]) -> tuple[str, dict[str, object]]:
    name, _, rest = spec.partition("=")
    kind, _, where = rest.partition(":")
    if kind == "git":
        where, _, strip = where.partition("#")
        repo, _, commit = where.rpartition("@")
        full = subprocess.run(
            ["git", "-C", repo, "rev-parse", commit], check=True, capture_output=True, text=True
        ).stdout.strip()
        files = _git_files(repo, full, strip)
        origin = f"{_repo_name(repo)} @ {full}"
    elif kind == "wheel":
        files, origin = _wheel_files(where), f"the wheel {Path(where).name}"
    elif kind == "dir":
        root, _, prefix = where.partition("#")
        files, origin = _dir_files(root, prefix), f"{prefix} of an installed {root}"
    elif kind == "stored":
        root, _, repo_commit = where.partition("@")
        repo, _, commit = repo_commit.partition("@")
        files = (
            (f.relative_to(root).as_posix(), f.read_text("utf-8", "replace"))
            for f in sorted(Path(root).rglob("*.py"))
            if _kept(f.relative_to(root).as_posix())
        )
        origin = f"{repo} (the search tool's stored version, read_file) @ {commit}"
    else:
        raise SystemExit(f"unknown source kind {kind!r} in {spec!r}")
    out: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for path, text in files:
        funcs, bases = qualnames(text)
        out[path] = sorted(q for q in funcs if split_name(q)[1] in wanted)
        for cls, names in bases.items():
            classes.setdefault(cls.rsplit(".", 1)[-1], []).extend(names)
    # the classes the tables name, and their bases up the chain
    keep: set[str] = set()
    todo = list(table_classes())
    while todo:
        cls = todo.pop()
        if cls in keep:
            continue
        keep.add(cls)
        todo.extend(classes.get(cls, ()))
    doc = {
        "source": origin,
        "files": dict(sorted(out.items())),
        "bases": {k: sorted(set(v)) for k, v in sorted(classes.items()) if k in keep},
    }
    return name, doc


def main(argv: list[str]) -> None:
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = table_functions()
    for spec in argv[1:]:
        name, doc = extract(spec, wanted)
        data = json.dumps(doc, indent=0, sort_keys=True).encode()
        # mtime=0: the same tree gives the same bytes
        (out_dir / f"{name}.json.gz").write_bytes(gzip.compress(data, mtime=0))
        print(f"{name}: {len(doc['files'])} files ({doc['source']})")  # type: ignore[arg-type]


if __name__ == "__main__":
    main(sys.argv[1:])
