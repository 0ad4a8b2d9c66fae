"""Record the functions of the real slime files that the demo job mirrors, at one commit.

    python scripts/extract_demo_layout.py OUT.json REPO_DIR@COMMIT DEMO_ROOT

For every `.py` file under DEMO_ROOT (demo/slime_hangdoctor_demo/job) that also exists at COMMIT of
the git repository REPO_DIR (a bare snapshot is fine), OUT.json holds the qualified names of all
its functions there (`Class.method`, `outer.<locals>.inner`, as py-spy prints them), so that
tests/unit/test_demo_layout.py can check the demo's frames against the real tree without it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path


def qualnames(source: str) -> list[str]:
    out: list[str] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(f"{prefix}{child.name}")
                walk(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return sorted(set(out))


def main(argv: list[str]) -> None:
    out, where, demo_root = argv
    repo, _, commit = where.rpartition("@")
    full = subprocess.run(
        ["git", "--git-dir", repo, "rev-parse", commit], check=True, capture_output=True, text=True
    ).stdout.strip()
    files: dict[str, list[str]] = {}
    root = Path(demo_root)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        shown = subprocess.run(
            ["git", "--git-dir", repo, "show", f"{full}:{rel}"], check=False, capture_output=True
        )
        if shown.returncode == 0:
            files[rel] = qualnames(shown.stdout.decode("utf-8", "replace"))
    doc = {"source": f"THUDM/slime @ {full}", "files": files}
    Path(out).write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    print(f"{len(files)} files ({doc['source']})")


if __name__ == "__main__":
    main(sys.argv[1:])
