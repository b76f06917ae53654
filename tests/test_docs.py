"""The lists in the docs that can drift from the code, compared with it: every config key with
its default and range (docs/configuration.md and the comments of config/telemetry.toml), the
keyword arguments of ``Collector()`` and the counters of ``stats()`` (docs/sdk.md), and the
alert rules (docs/operations.md against config/deploy/prometheus-alerts.yml)."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector._collector import _KEYWORDS
from collector.config import sections_of
from collector.counters import SDK, SDK_GAUGES
from reporter._config import ReporterConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text(encoding="utf-8")
SDK_DOC = (DOCS / "sdk.md").read_text(encoding="utf-8")
OPERATIONS = (DOCS / "operations.md").read_text(encoding="utf-8")
SHIPPED_TOML = (ROOT / "config" / "telemetry.toml").read_text(encoding="utf-8")
ALERTS = yaml.safe_load(
    (ROOT / "config" / "deploy" / "prometheus-alerts.yml").read_text(encoding="utf-8")
)

GAMES = 'games."<game>"'
# A number as the docs write it: 86 400, 86,400 or 86400, maybe with decimals.
# a minus sign only where it is not a dash between two numbers ("0-170")
NUMBER = re.compile(r"(?:(?<!\d)-)?(?:\d{1,3}(?:[ ,]\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")


def config_sections() -> dict[str, type]:
    """Section name -> its settings class, the games table included."""
    classes = dict(sections_of(ReporterConfig))
    games_type = typing.get_type_hints(ReporterConfig)["games"]
    classes[GAMES] = typing.get_args(games_type)[1]
    return classes


def fields_of(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def as_toml(value: Any) -> str:
    """A default as the docs write it (a TOML literal)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return (
            "{}"
            if not value
            else "{ "
            + ", ".join(f"{json.dumps(k)} = {as_toml(v)}" for k, v in value.items())
            + " }"
        )
    if isinstance(value, tuple | list):
        return "[" + ", ".join(as_toml(v) for v in value) + "]"
    return repr(value)


def number(text: str) -> float:
    return float(text.replace(" ", "").replace(",", ""))


def doc_tables() -> dict[str, dict[str, list[str]]]:
    """docs/configuration.md's ``### `[section]` `` tables: section -> key -> its cells."""
    tables: dict[str, dict[str, list[str]]] = {}
    for block in CONFIGURATION.split("\n### `[")[1:]:
        name = block[: block.index("]`")]
        rows = {}
        for line in block.splitlines():
            if line.startswith("| `"):
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                rows[cells[0].strip("`")] = cells[1:]
        tables[name] = rows
    return tables


def test_configuration_md_documents_every_key_with_its_default_and_range() -> None:
    tables = doc_tables()
    sections = config_sections()
    assert set(tables) == set(sections)
    problems = []
    for name, cls in sections.items():
        fields = fields_of(cls)
        rows = tables[name]
        missing, extra = set(fields) - set(rows), set(rows) - set(fields)
        if missing or extra:
            problems.append(f"[{name}]: undocumented {sorted(missing)}, unknown {sorted(extra)}")
        default_instance = cls()
        for key in set(fields) & set(rows):
            _type, default, allowed = rows[key][:3]
            meta = fields[key].metadata
            expected = as_toml(getattr(default_instance, key))
            if default != f"`{expected}`":
                problems.append(f"[{name}] {key}: default {default}, the code's is {expected}")
            if meta.get("lo") is not None:
                found = [number(n) for n in NUMBER.findall(allowed)][:2]
                if found != [meta["lo"], meta["hi"]]:
                    problems.append(
                        f"[{name}] {key}: range {allowed!r}, the code's is "
                        f"{meta['lo']:g} to {meta['hi']:g}"
                    )
            for choice in meta.get("choices") or ():
                if f'"{choice}"' not in allowed:
                    problems.append(f"[{name}] {key}: range {allowed!r} lacks {choice!r}")
    assert not problems, "\n".join(problems)


def commented_keys(text: str) -> Iterator[tuple[str, str, str]]:
    """(section, key, the comment block above it) for each key the shipped file sets; a
    sub-table header (``[reporter.hot_games]``) stands for its section's key, unless it is a
    section of its own (``[sink.ndjson]``)."""
    section, comment = "", []
    sections = config_sections()
    for line in text.splitlines():
        if line.startswith("#"):
            comment.append(line)
            continue
        if header := re.fullmatch(r"\[([a-z_]+)(?:\.([a-z_]+))?\]", line):
            section = header.group(1)
            if f"{section}.{header.group(2)}" in sections:  # a section inside another
                section = f"{section}.{header.group(2)}"
            elif header.group(2):
                yield section, header.group(2), "\n".join(comment)
        elif key := re.match(r"([a-z_]+) = ", line):
            yield section, key.group(1), "\n".join(comment)
        comment = []


def test_the_shipped_file_states_each_range_the_code_enforces() -> None:
    sections = config_sections()
    seen, problems = set(), []
    for section, key, comment in commented_keys(SHIPPED_TOML):
        meta = fields_of(sections[section])[key].metadata
        seen.add((section, key))
        if meta.get("lo") is None:
            continue
        stated = re.search(r"\((\d[\d.]*)-(\d[\d.]*)[);]", comment)
        if stated is None:
            problems.append(f"[{section}] {key}: no (lo-hi) range in its comment")
        elif [float(stated.group(1)), float(stated.group(2))] != [meta["lo"], meta["hi"]]:
            problems.append(
                f"[{section}] {key}: comment says {stated.group(0)}, the code "
                f"{meta['lo']:g}-{meta['hi']:g}"
            )
    assert not problems, "\n".join(problems)
    assert len(seen) > 60  # the parse found the file's keys


def test_sdk_md_lists_every_collector_keyword_under_its_section() -> None:
    table = SDK_DOC[SDK_DOC.index("| section | keywords |") :]
    documented = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `["):
            break
        section, keywords = (c.strip() for c in line.strip("|").split(" | "))
        for keyword in re.findall(r"`(\w+)`", keywords):
            documented[keyword] = section.strip("`[]")
    assert documented == _KEYWORDS


def test_sdk_md_lists_every_stats_counter() -> None:
    table = SDK_DOC[SDK_DOC.index("| counter | meaning |") :]
    documented = []
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        documented.append(line.split("`")[1])
    assert sorted(documented) == sorted(str(name) for name in (*SDK, *SDK_GAUGES))


def rules() -> dict[str, dict[str, str]]:
    return {rule["alert"]: rule for group in ALERTS["groups"] for rule in group["rules"]}


def duration_words(rule: Mapping[str, str]) -> list[str]:
    """How a row may say the rule's ``for:``: "for 5 minutes", "for 1 minute", "for a minute"."""
    minutes = int(rule["for"].removesuffix("m"))
    return ["for a minute", "for 1 minute"] if minutes == 1 else [f"for {minutes} minutes"]


def rows_naming(name: str) -> list[str]:
    return [
        line for line in OPERATIONS.splitlines() if line.startswith("|") and f"`{name}`" in line
    ]


def test_operations_md_lists_every_shipped_alert_as_it_is() -> None:
    shipped = rules()
    listed = re.findall(r"^\| `(Telemetry\w+)` \|", OPERATIONS, re.M)
    assert sorted(listed) == sorted(shipped)
    for name, rule in shipped.items():
        row = next(line for line in OPERATIONS.splitlines() if line.startswith(f"| `{name}` |"))
        if "for" in rule:
            assert any(words in row for words in duration_words(rule)), (name, row)
        else:
            assert not re.search(r"for (a|\d+) minutes?", row), (name, row)
        for window in re.findall(r"\[(\d+)m\]", rule["expr"]):
            assert f"{window} minutes" in row, (name, window, row)


def test_every_expression_naming_an_alert_is_the_shipped_one() -> None:
    """A row that gives an alert's PromQL gives the rule's expression and duration."""
    checked = 0
    for name, rule in rules().items():
        expr = " ".join(rule["expr"].split())
        for row in rows_naming(name):
            expressions = [
                e
                for e in re.findall(r"`([^`]+)`", row)
                if "telemetry_" in e and re.search(r"[<>=]", e)
            ]
            if not expressions:
                continue
            checked += 1
            assert f"`{expr}`" in row, (name, row)
            if "for" in rule:
                assert any(words in row for words in duration_words(rule)), (name, row)
    assert checked >= 10


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_name_no_missing_module_or_file(page: str) -> None:
    """Paths of the project's own modules and scripts that a page names exist."""
    text = (DOCS / page).read_text(encoding="utf-8")
    for path in re.findall(
        r"`((?:collector|reporter|lua|bench|config|tests)/[\w/.-]+\.\w+)`", text
    ):
        assert (ROOT / path).exists(), f"{page} names {path}, which does not exist"


def test_benchmarks_md_has_a_section_and_a_row_for_every_bench_script() -> None:
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    assert sorted(re.findall(r"^## bench/(\w+\.py)$", text, re.M)) == scripts
    rows = re.findall(r"^\| \[bench/(\w+)\.py\]\(#bench(\w+)py\) \|", text, re.M)
    assert sorted(f"{name}.py" for name, _ in rows) == scripts
    for name, anchor in rows:
        assert anchor == name, f"the row of {name}.py links to #bench{anchor}py"
        section = text.split(f"\n## bench/{name}.py\n", 1)[1].split("\n## ", 1)[0]
        assert "### Current figures" in section or "Figures: [" in section, (
            f"bench/{name}.py: no current figures, nor a link to them"
        )


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    found: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        base = slug(heading)
        name, n = base, 0
        while name in found:  # a repeated heading gets -1, -2, ...
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", PAGES)
def test_links_between_pages_resolve(page: str) -> None:
    """Every relative link of README.md and docs/ names a file that exists and, with a
    #fragment, a heading of that file."""
    source = ROOT / page
    text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, fragment = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists() or (
            fragment and file.suffix == ".md" and fragment not in anchors(file)
        ):
            broken.append(target)
    assert not broken, f"{page}: {broken}"
