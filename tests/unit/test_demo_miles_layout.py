"""The demo job laid out as miles (issue 24 item 5): launch.miles_job derives it from the demo job
at launch. Its files must be where the real miles tree has them (tests/fixtures/layouts/
miles-2026-08.json.gz, read from radixark/miles @ 31f1ca961), and its imports must resolve in it."""

from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path

import pytest

from slime_hangdoctor_demo.faults import FAULTS
from slime_hangdoctor_demo.launch import (
    JOB_DIR,
    JOB_LAYOUTS,
    MILES_LACKS,
    MILES_MOVES,
    DemoError,
    job_layout,
    miles_job,
    start_demo,
)

MILES_TREE = Path(__file__).resolve().parents[1] / "fixtures" / "layouts" / "miles-2026-08.json.gz"


def _miles_files() -> set[str]:
    return set(json.loads(gzip.decompress(MILES_TREE.read_bytes()))["files"])


def _imports(tree: ast.Module) -> list[str]:
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def test_every_miles_file_of_the_job_is_where_miles_has_it(tmp_path: Path) -> None:
    job = miles_job(tmp_path / "job")
    ours = {
        str(p.relative_to(job)) for p in job.rglob("*.py") if p.parts[len(job.parts)] == "miles"
    }
    assert ours and not (job / "slime").exists()
    assert ours - set(MILES_LACKS) <= _miles_files(), sorted(ours - _miles_files())
    assert not set(MILES_LACKS) & _miles_files(), "miles has it now: drop it from MILES_LACKS"
    for old, new in MILES_MOVES.items():
        assert (JOB_DIR / old).is_file() and (job / new).is_file()
    assert "class RolloutManager" in (job / "miles/ray/rollout/rollout_manager.py").read_text()


def test_the_miles_job_imports_only_itself(tmp_path: Path) -> None:
    job = miles_job(tmp_path / "job")
    for path in job.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"\bslime\.(?=[A-Za-z_])", text), path
        for module in _imports(ast.parse(text)):
            if module.split(".")[0] != "miles":
                continue
            parts = module.split(".")
            found = (job / Path(*parts)).with_suffix(".py").is_file() or (
                job / Path(*parts) / "__init__.py"
            ).is_file()
            assert found, f"{path.relative_to(job)} imports {module}, which the job lacks"


def test_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DemoError, match="unknown demo job layout"):
        start_demo("none", workdir=tmp_path, layout="verl")


def test_a_fault_runs_on_its_own_layout_and_refuses_another() -> None:
    """`slime-hangdoctor demo --layout L` (issue 35 item 6): a fault that needs a layout runs on it
    by default and on no other; the others run on any, slime's by default."""
    assert {spec.layout for spec in FAULTS.values()} - {None} <= set(JOB_LAYOUTS)
    session = FAULTS["weight_update_session_stuck"]
    assert job_layout(session, None) == "miles" == job_layout(session, "miles")
    with pytest.raises(DemoError, match="miles layout only"):
        job_layout(session, "slime")
    assert job_layout(FAULTS["reward_hang"], None) == "slime"
    assert job_layout(FAULTS["reward_hang"], "miles") == "miles"


def test_the_miles_job_opens_miles_mains_weight_update_session(tmp_path: Path) -> None:
    """The miles job's weight update calls the session functions where miles has them
    (update_weight/common.py, SGLangEngine's methods in sglang_utils/sglang_engine.py), which the
    recorded miles tree lists there; slime's own job never calls them."""
    job = miles_job(tmp_path / "job")
    tree = json.loads(gzip.decompress(MILES_TREE.read_bytes()))["files"]
    common = "miles/backends/megatron_utils/update_weight/common.py"
    engine = "miles/backends/sglang_utils/sglang_engine.py"
    for rel, names in (
        (common, ("begin_weight_update", "end_weight_update")),
        (engine, ("SGLangEngine.begin_weight_update", "SGLangEngine.end_weight_update")),
    ):
        defined = {
            n.name if rel == common else f"SGLangEngine.{n.name}"
            for n in ast.walk(ast.parse((job / rel).read_text()))
            if isinstance(n, ast.FunctionDef)
        }
        for name in names:
            assert name in tree[rel] and name in defined, (rel, name)
    moved = (
        job
        / MILES_MOVES[
            "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py"
        ]
    )
    text = moved.read_text()
    assert "begin_weight_update(" in text and "end_weight_update(" in text
    assert 'WEIGHT_UPDATE_SESSION = __name__.split(".", 1)[0] == "miles"' in text
