"""docs/field-guide.md claims only what its tests show (issue 21 item 6, issue 35 item 5).

For each row of the guide's table (and the "Also reported" paragraph): every test the row cites
exists (demo faults, recorded bundles' goldens, test files and test functions); every finding
rule id the row claims, before its "**Not shown by a test**" part, is shown by what the row cites:
the golden verdict of a cited recorded bundle lists it, or a cited test file asserts it; and the
verdict of every cited recorded bundle (its golden) and of every cited demo fault (its expected
verdict, which the live suite checks) is claimed by the row: its status (`HUNG` and the stage as
`stage`, or `PROGRESSING`) and its culprit (the first culprit's role named after "culprit", or
"no culprit").

Issue 45's section ("Where the issue 45 cases stand"): every case the issue lists stands once,
either "stage and culprit shown by a recording" (a line held to the same checks as a row: it cites a recording whose verdict it
claims and a test) or `missing` (it says what is missing and which part of the issue builds it);
every newer case of the issue has a row of the table."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor_demo.faults import FAULTS

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "field-guide.md"
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "verdicts"
NOT_SHOWN = "**Not shown by a test"
_RULE = re.compile(r"[a-z][a-z0-9_]*(?:[.-][a-z0-9_]+)+")
_TICKED = re.compile(r"`([^`]+)`")
_TEST_REF = re.compile(r"^(tests/[\w/]+\.py)?(?:::(\w+)(?:\[[^\]]*\])?)?$")


def _rule_ids() -> frozenset[str]:
    """Every string literal of the analysis code that has the shape of a finding's rule id."""
    found: set[str] = set()
    for path in (ROOT / "slime_hangdoctor" / "analysis").rglob("*.py"):
        found.update(
            lit for lit in re.findall(r'"([^"\n]+)"', path.read_text()) if _RULE.fullmatch(lit)
        )
    return frozenset(found)


@dataclass(frozen=True)
class Row:
    name: str
    claims: str  # what the doctor says, up to what the row says no test shows
    cited: str  # where the row names its tests


def _rows() -> list[Row]:
    text = GUIDE.read_text()
    rows: list[Row] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("#", "---"):
            continue
        rows.append(Row(f"{cells[0]}: {cells[1][:40]}", cells[3].split(NOT_SHOWN)[0], cells[5]))
    also = text[text.index("**Also reported**") :].split("\n## ")[0]
    rows.append(Row("also reported", also.split(NOT_SHOWN)[0], also.split(NOT_SHOWN)[0]))
    return rows


# --------------------------------------------------------------------------- issue 45's cases

STANDING = "## Where the issue 45 cases stand"
SHOWN = "stage and culprit shown by a recording"
# the 16 cases whose culprit was weak, missing or not shown by a recording, then the newer ones
ISSUE_45_WEAK = (
    "sglang#34582",
    "sglang#26454",
    "NVIDIA/nccl#2379",
    "sglang#30209",
    "sglang PR#17870",
    "slime#1487",
    "slime PR#862",
    "slime PR#393",
    "Megatron-LM#5749",
    "miles#574",
    "vime PR#168",
    "sglang PR#33934",
    "sglang PR#29670",
    "open-instruct PR#1454",
    "slime#1908",
    "slime#674",
)
ISSUE_45_NEW = (
    "sglang#27221",
    "sglang#33289",
    "sglang PR#20287",
    "verl PR#5591",
    "ray#65147",
    "sglang#33696",
    "slime PR#2015",
)


@dataclass(frozen=True)
class Standing:
    case: str
    stands: str  # SHOWN | missing
    text: str  # the verdict and what shows it, or what is missing
    built_by: str


def _standing() -> list[Standing]:
    section = GUIDE.read_text().split(STANDING, 1)[1].split("\n## ")[0]
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("case", "---"):
            out.append(Standing(*cells))
    return out


STANDINGS = _standing()


def _case_key(key: str, case: str) -> bool:
    """`key` (`sglang PR#17870`, `slime#674`) names the case cell `case` (`sgl-project/sglang
    PR#17870: ...`, `slime PR#862, #846`): its project, then its number."""
    project, number = key.split("#", 1)
    project = project.removesuffix(" PR").strip()
    return bool(re.search(rf"{re.escape(project)}[^|]*?#{re.escape(number)}\b", case))


def test_every_issue_45_case_stands_once() -> None:
    for key in (*ISSUE_45_WEAK, *ISSUE_45_NEW):
        lines = [s for s in STANDINGS if _case_key(key, s.case)]
        assert len(lines) == 1, f"{key}: {len(lines)} lines in {STANDING!r}"
    assert len(STANDINGS) == len(ISSUE_45_WEAK) + len(ISSUE_45_NEW)
    assert {s.stands for s in STANDINGS} <= {SHOWN, "missing"}


def test_every_newer_case_has_a_row_of_the_table() -> None:
    cases = [
        cells[1]
        for line in GUIDE.read_text().split(STANDING)[0].splitlines()
        if len(cells := [c.strip() for c in line.strip().strip("|").split("|")]) == 6
    ]
    for key in ISSUE_45_NEW:
        assert any(_case_key(key, c) for c in cases), f"{key}: no row"


@pytest.mark.parametrize("s", STANDINGS, ids=[s.case for s in STANDINGS])
def test_a_case_stands_on_a_recording_or_says_what_is_missing(s: Standing) -> None:
    if s.stands == SHOWN:
        row = Row(f"issue 45, {s.case}", s.text, s.text)
        assert _shown(row), f"{s.case}: shown, but no recorded bundle or demo fault is cited"
        assert _test_files(s.text), f"{s.case}: shown, but no test is cited"
        assert "HUNG" in s.text or "PROGRESSING" in s.text
    else:
        assert s.text.startswith("missing: ") and len(s.text.split()) >= 12, s.case
        assert s.built_by, f"{s.case}: who builds it?"


def test_the_case_key_can_fail() -> None:
    assert _case_key("sglang PR#17870", "sglang PR#17870")
    assert _case_key("slime PR#862", "slime PR#862, #846")
    assert not _case_key("slime#1487", "slime PR#2123 (slime#14870)")
    assert not _case_key("sglang#26454", "sglang#34582, #29144")


ROWS = _rows() + [Row(f"issue 45, {s.case}", s.text, s.text) for s in STANDINGS if s.stands == SHOWN]


def _goldens(cited: str) -> list[Path]:
    """The golden verdicts of the recorded bundles `cited` names: demo faults (`demo-NAME`,
    `demo2-NAME`) and GPU bundles by their own name."""
    out: list[Path] = []
    for name in _TICKED.findall(cited):
        out += [p for p in (GOLDEN / f"{name}.json",) if p.is_file()]
        if name in FAULTS:
            out += list(GOLDEN.glob(f"demo*-{name}.json"))
    return out


def _test_files(cited: str) -> list[Path]:
    return [
        ROOT / m.group(1)
        for t in _TICKED.findall(cited)
        if (m := _TEST_REF.match(t)) and m.group(1)
    ]


def test_the_guide_has_every_case() -> None:
    numbered = [r for r in ROWS if r.name.split(":")[0].isdigit()]
    assert len(numbered) == 22 and len(ROWS) >= 25


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_every_cited_test_exists(row: Row) -> None:
    current: Path | None = None
    for ticked in _TICKED.findall(row.cited):
        m = _TEST_REF.match(ticked)
        if m is None or not (m.group(1) or m.group(2)):
            continue
        if m.group(1):
            current = ROOT / m.group(1)
            assert current.is_file(), ticked
        if m.group(2):
            assert current is not None, ticked
            assert re.search(rf"^def {m.group(2)}\(", current.read_text(), re.M), ticked
    demos = re.findall(r"demo ((?:`\w+`(?:, )?)+)", row.cited)
    for group in demos:
        for name in _TICKED.findall(group):
            assert name in FAULTS, f"{row.name}: no demo fault {name}"
    for name in re.findall(r"GPU bundles? ((?:`[\w.-]+`(?:[, ]+)?)+)", row.cited):
        for bundle in _TICKED.findall(name):
            assert (GOLDEN / f"{bundle}.json").is_file(), bundle


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_every_claimed_rule_is_shown_by_what_the_row_cites(row: Row) -> None:
    rules = _rule_ids()
    claimed = {t for t in _TICKED.findall(row.claims) if t in rules}
    goldens = " ".join(p.read_text() for p in _goldens(row.cited))
    tests = " ".join(p.read_text() for p in _test_files(row.cited))
    unshown = sorted(r for r in claimed if f'"{r}"' not in goldens and f'"{r}"' not in tests)
    assert not unshown, f"{row.name}: claimed, but no cited golden or test shows {unshown}"


# --------------------------------------------------------------------------- the claimed verdicts

# How a row names the first culprit's role (verdict.Role values)
ROLE_WORDS = {
    "sglang_engine": "engine",
    "train_rank": "rank",
    "rollout_manager": "RolloutManager",
    "driver": "driver",
    "router": "router",
}


@dataclass(frozen=True)
class Shown:
    """The verdict one cited test shows: a recorded bundle's golden or a demo fault's expected."""

    where: str
    status: str
    stage: str
    culprit: str | None  # the first culprit's role


def _cited_faults(cited: str) -> list[str]:
    return [
        name
        for group in re.findall(r"demo ((?:`\w+`(?:, )?)+)", cited)
        for name in _TICKED.findall(group)
    ]


def _shown(row: Row) -> list[Shown]:
    out = []
    for path in dict.fromkeys(_goldens(row.cited)):
        g = json.loads(path.read_text())
        culprit = g["culprits"][0]["role"] if g["culprits"] else None
        out.append(Shown(path.stem, g["status"], g["stage"], culprit))
    for name in dict.fromkeys(_cited_faults(row.cited)):
        e = FAULTS[name].expected
        out.append(Shown(f"demo {name}", e.status, e.stage, e.culprit_role))
    return out


def _unclaimed(claims: str, shown: Shown) -> str | None:
    """Why the row's claims do not state `shown`'s verdict, or None when they do."""
    if shown.status == "progressing":
        return None if "PROGRESSING" in claims else "PROGRESSING is not claimed"
    if "HUNG" not in claims or f"`{shown.stage}`" not in claims:
        return f"HUNG in `{shown.stage}` is not claimed"
    if shown.culprit is None:
        return None if "no culprit" in claims else "no culprit is not claimed"
    word = ROLE_WORDS[shown.culprit]
    if re.search(rf"culprits?\b[^.;]*?\b{word}", claims):
        return None
    return f"the culprit {word} is not claimed"


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_every_cited_verdict_is_claimed_by_the_row(row: Row) -> None:
    wrong = [f"{s.where}: {why}" for s in _shown(row) if (why := _unclaimed(row.claims, s))]
    assert not wrong, f"{row.name}: {wrong}"


def test_the_verdict_check_reads_the_verdicts() -> None:
    """Guard on the check itself: the rows cite verdicts of every kind, and a claim that names
    another stage or culprit than a cited bundle shows fails."""
    shown = [s for r in ROWS for s in _shown(r)]
    assert {s.status for s in shown} == {"hung", "progressing"} and len(shown) >= 40
    hung = next(s for s in shown if s.status == "hung" and s.culprit == "sglang_engine")
    assert _unclaimed(f"HUNG in `{hung.stage}`, culprit the engine", hung) is None
    assert _unclaimed("HUNG in `reward`, culprit the engine", hung) is not None
    assert _unclaimed(f"HUNG in `{hung.stage}`, culprit the RolloutManager", hung) is not None
