"""The documentation: README.md is the front door and CI's source of the test command; docs/ is the guide.

Every relative link (and its #anchor) resolves, the quick start stays one line that works
where the system Python is protected (PEP 668), and the README stays short.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_BYTES = 40_000
CI_MARKER = "<!-- ci:test-command -->"

INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def links(path: Path) -> list[str]:
    """Every link target on a page: inline links and reference definitions, outside code blocks."""
    found = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            found.append(definition.group(1))
        else:
            found.extend(INLINE_LINK.findall(line))
    return found


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = github_anchor(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def relative_links() -> list[tuple[str, str]]:
    return [
        (page.relative_to(REPO).as_posix(), target)
        for page in PAGES
        for target in links(page)
        if not SCHEME.match(target)
    ]


def test_the_guide_exists():
    names = {page.name for page in DOCS}
    assert {
        "index.md",
        "commands.md",
        "formats.md",
        "metrics.md",
        "json.md",
        "performance.md",
        "robustness.md",
        "limits.md",
        "development.md",
    } <= names


def test_link_extraction_sees_inline_reference_and_anchor_links(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "See [a](docs/a.md#x-y) and [`b`](#b).\n\n```\n[not](c.md)\n```\n[ref]: ../d.md\n[web]: https://example.org\n",
        encoding="utf-8",
    )
    assert links(page) == ["docs/a.md#x-y", "#b", "../d.md", "https://example.org"]


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# stabcli\n## `stabcli audit`\n### Downstream fluctuation: `--labels`\n"
        "## Limits\n## Limits\n```\n# not a heading\n```\n",
        encoding="utf-8",
    )
    assert anchors(page) == {"stabcli", "stabcli-audit", "downstream-fluctuation---labels", "limits", "limits-1"}


@pytest.mark.parametrize("page, target", relative_links())
def test_every_relative_link_resolves(page, target):
    path_part, _, anchor = target.partition("#")
    source = REPO / page
    linked = (source.parent / path_part).resolve() if path_part else source
    assert linked.exists(), f"{page} links to {target}, which does not exist"
    assert linked.is_relative_to(REPO), f"{page} links to {target}, outside the repository"
    if anchor and linked.suffix == ".md":
        assert anchor in anchors(linked), f"{page} links to {target}: no such heading in {linked.name}"


def test_every_doc_page_is_linked_from_the_index():
    linked = {target.partition("#")[0] for target in links(REPO / "docs" / "index.md")}
    missing = [page.name for page in DOCS if page.name != "index.md" and page.name not in linked]
    assert not missing


def test_readme_links_to_every_doc_page():
    linked = {target.partition("#")[0] for target in links(README)}
    missing = [page.name for page in DOCS if f"docs/{page.name}" not in linked]
    assert not missing


def test_readme_is_a_front_door_not_the_manual():
    size = len(README.read_bytes())
    assert size < README_MAX_BYTES, f"README.md is {size:,} bytes; move detail into docs/"


def test_no_page_refers_to_a_spec_that_is_not_in_the_repository():
    for page in PAGES:
        assert not re.search(r"\bSPEC\b", page.read_text(encoding="utf-8")), page.name


def ci_test_command() -> str:
    """The command `.ci/run` reads: the first line of the code block after the marker."""
    result = subprocess.run(
        [
            "awk",
            r"/<!-- ci:test-command -->/ {found=1; next} found && /^```/ {if (inblock) exit; "
            r"inblock=1; next} found && inblock {print; exit}",
            str(README),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_readme_carries_the_ci_test_command():
    assert CI_MARKER in README.read_text(encoding="utf-8")
    assert "awk" in (REPO / ".ci" / "run").read_text(encoding="utf-8")  # CI still reads it from the README
    command = ci_test_command()
    assert re.search(r"pip install (-e )?'\.\[[\w,]*test[\w,]*\]'", command), command
    assert "pytest" in command


def quick_start_commands() -> list[str]:
    """The shell code blocks of the README's Quick start section, one string per block."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


def test_quick_start_is_two_one_line_commands():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)
    assert commands[1] == ci_test_command()


def test_first_quick_start_command_needs_no_writable_system_python():
    """PEP 668: a bare `pip install` is refused on a protected system Python; install into a venv."""
    first = quick_start_commands()[0]
    assert first.startswith("python3 -m venv .venv && ")
    steps = first.split(" && ")
    assert all(not step.startswith(("pip ", "stabcli ")) for step in steps)
    assert ".venv/bin/pip install '.[plots]'" in steps
    assert steps[-1] == ".venv/bin/stabcli demo"


def test_development_guide_draws_every_module_of_the_package():
    """docs/development.md's package tree (after ``<!-- package-layout -->``) and ``ls -R stabcli``
    list the same modules: a module added without its line in the tree fails here."""
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    block = text.split("<!-- package-layout -->", 1)[1].split("```", 2)[1]
    drawn, folders = set(), []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        folders = folders[: depth - 1]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            drawn.add("/".join(["stabcli", *folders, name]))
    package = REPO / "stabcli"
    on_disk = {
        path.relative_to(REPO).as_posix()
        for path in package.rglob("*")
        if (path.suffix == ".py" or path.name == "py.typed")
        and not (path.name == "__init__.py" and path.parent != package)  # a folder's line stands for it
    }
    assert drawn == on_disk, (
        f"missing from the tree: {sorted(on_disk - drawn)}; not in stabcli/: {sorted(drawn - on_disk)}"
    )
