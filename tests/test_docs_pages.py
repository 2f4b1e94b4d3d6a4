"""The README and the pages under docs/ as a reader meets them.

- Every relative link lands: the file exists, and an anchor is a heading of that file (GitHub's slug rule).
- Every option a page names for `capcon VERB` is in that verb's parser; every other option in backticks is in
  some verb's parser, or is another tool's, listed here.
- Every JSON key docs/reference.md lists is in the JSON the commands print on the shipped plans and a
  simulated fleet.
- The README stays a front page: short, its screenshot near the top, its table cells short; no prose line on
  any page is a wall of text.

docs/method.md's worked figures are tests/test_docs.py's business.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path

import pytest

from console.cli import VERBS, build_parser, main
from tests.sim.running import start_sim

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
REFERENCE = DOCS / "reference.md"
SHIPPED_PLANS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "plans").glob("*.yaml"))
SIM_PLAN = "plans/internal-assistant-18rps.yaml"  # has no fleet section: the test writes one per fleet

README_MAX_LINES = 200
README_SCREENSHOT_BEFORE_LINE = 40
README_MAX_CELL = 200
MAX_PROSE_LINE = 400

# Options of other tools that the pages name in backticks, each with where it belongs.
OTHER_TOOLS_OPTIONS = {
    # pytest plugins the test pages name: pytest-textual-snapshot, pytest-xdist (-n and -m are single-dash)
    "--snapshot-update",
    "--dist",
    # `vllm serve`, in docs/method.md's levers
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    # `vllm bench serve`, whose results `capcon bench import` reads
    "--goodput",
    "--save-result",
    "--save-detailed",
}
JSON_LITERALS = {"null", "true", "false"}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?:-\*)?")
# `capcon VERB ...`, also as `.venv/bin/capcon`; not `capcon_gateway_...` or `/capcon,` in a URL.
CAPCON = re.compile(r"(?:^|(?<=[\s/(\[]))capcon[ \t]+")
COMMAND_END = re.compile(r"\s(?:\|\||\||&&|;|#)\s?|;")  # a shell pipe, a chain, a comment
BENCHMARK = re.compile(r"benchmarks/(bench_\w+\.py)(.*)")
KEY = re.compile(r"[a-z][a-z0-9_]*")
QUOTED_KEY = re.compile(r'"([a-z][a-z0-9_]*)"\s*:')


# --- reading a page -------------------------------------------------------------------------------------------


def split_page(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, code lines), each with its line number. Code: fenced blocks, and indented blocks (four
    spaces after a blank line; list items on these pages continue with two or three)."""
    prose, code = [], []
    fenced = indented = False
    previous_blank = True
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            previous_blank = False
            continue
        if fenced:
            code.append((number, line))
            continue
        blank = not line.strip()
        if not blank:
            indented = line.startswith("    ") and (previous_blank or indented)
        (code if indented and not blank else prose).append((number, line))
        previous_blank = blank
    return prose, code


def paragraphs(prose: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Runs of non-blank prose lines joined, with the first line's number (a code span may wrap a line); a
    heading is a paragraph of its own."""
    found, lines, first = [], [], 0
    for number, line in [*prose, (0, "")]:
        heading = HEADING.match(line)
        if lines and (heading or not line.strip()):
            found.append((first, "\n".join(lines)))
            lines = []
        if heading:
            found.append((number, line))
        elif line.strip():
            first = first if lines else number
            lines.append(line)
    return found


def code_spans(text: str) -> list[str]:
    return [" ".join(match.group(2).split()) for match in CODE_SPAN.finditer(text)]


def without_code_spans(text: str) -> str:
    return CODE_SPAN.sub("code", text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation other than '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in split_page(path)[0]:
        if match := HEADING.match(line):
            base = slug(match.group(2))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return frozenset(found)


def broken_links(path: Path) -> list[str]:
    broken = []
    for number, text in paragraphs(split_page(path)[0]):
        for target in LINK.findall(without_code_spans(text)):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not fetched
                continue
            file_part, _, anchor = target.partition("#")
            landing = (path.parent / file_part).resolve() if file_part else path
            if not landing.exists():
                broken.append(f"{path.name}:{number}: {target}: no such file")
            elif anchor and landing.suffix == ".md" and anchor not in anchors(landing):
                broken.append(f"{path.name}:{number}: {target}: no heading '{anchor}' in {landing.name}")
    return broken


# --- options --------------------------------------------------------------------------------------------------


def long_options(parser: argparse.ArgumentParser) -> frozenset[str]:
    return frozenset(o for action in parser._actions for o in action.option_strings if o.startswith("--"))


@cache
def verb_options() -> dict[str, frozenset[str]]:
    """Each verb's long options, and each sub-verb's (`overflow status`, `overflow set`) under its own name;
    "" holds capcon's own (`--help`, `--version`)."""
    parser = build_parser()
    options = {"": long_options(parser)}
    for verb, verb_parser in parser.verb_parsers.items():
        options[verb] = long_options(verb_parser)
        for action in verb_parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub_parser in action.choices.items():
                    options[f"{verb} {name}"] = long_options(sub_parser)
    return options


@cache
def every_capcon_option() -> frozenset[str]:
    return frozenset().union(*verb_options().values())


@cache
def benchmark_options(script: str) -> frozenset[str] | None:
    """The options a benchmark script's source declares (its argparse strings); None: no such script."""
    path = ROOT / "benchmarks" / script
    return frozenset(re.findall(r"[\"'](--[a-z][a-z0-9-]*)[\"']", path.read_text())) if path.exists() else None


def accepted(option: str, known: frozenset[str]) -> bool:
    if option.endswith("-*"):  # `--keep-*`: some option of that family
        return any(o.startswith(option[:-1]) for o in known)
    return option in known


def parsers_named(words: list[str]) -> tuple[str, frozenset[str]] | None:
    """The parser a command's words after `capcon` address, with its name; None for a word that is no verb
    (`capcon VERB --help`, `capcon X.Y.Z`). `overflow status|set` accepts what either sub-verb does."""
    if not words or words[0].startswith("--"):
        return "capcon", verb_options()[""]
    verb = words[0]
    if verb not in VERBS:
        return None
    subs = words[1].split("|") if len(words) > 1 else []
    named = [f"{verb} {sub}" for sub in subs if f"{verb} {sub}" in verb_options()]
    if named:
        return f"capcon {' or '.join(named)}", frozenset().union(*(verb_options()[n] for n in named))
    return f"capcon {verb}", verb_options()[verb]


def command_problems(text: str, bare_verb: bool = False) -> list[str] | None:
    """Options a command names that its parser lacks: `capcon VERB ...` or `benchmarks/bench_x.py ...`
    anywhere in the text, or (bare_verb) a text that starts with a verb and an option (`watch --once`).
    None when the text holds no such command."""
    text = text.replace("\\|", "|")  # a pipe escaped inside a table cell
    found = None
    commands = [(text[m.end() :], None) for m in CAPCON.finditer(text)]
    if bare_verb and not commands and text.split(" ", 1)[0] in VERBS and OPTION.search(text):
        commands = [(text, None)]
    commands += [(m.group(2), m.group(1)) for m in BENCHMARK.finditer(text)]
    for rest, script in commands:
        rest = COMMAND_END.split(rest, 1)[0]
        found = found or []
        if script is not None:
            name, known = f"benchmarks/{script}", benchmark_options(script)
            if known is None:
                found.append(f"{name}: no such script")
                continue
        elif (named := parsers_named(rest.split())) is not None:
            name, known = named
        else:
            name, known = "capcon", every_capcon_option()
        found += [
            f"{option} is not an option of {name}" for option in OPTION.findall(rest) if not accepted(option, known)
        ]
    return found


def option_problems(path: Path) -> list[str]:
    """Options in commands (code blocks and code spans) that their verb lacks, and backticked options that no
    verb and no listed tool has."""
    prose, code = split_page(path)
    problems = [f"{path.name}:{n}: {p}" for n, line in code for p in command_problems(line) or []]
    for number, text in paragraphs(prose):
        for span in code_spans(text):
            in_command = command_problems(span, bare_verb=True)
            if in_command is not None:
                problems += [f"{path.name}:{number}: `{span}`: {p}" for p in in_command]
                continue
            problems += [
                f"{path.name}:{number}: `{span}`: {option} is no verb's option nor a listed tool's"
                for option in OPTION.findall(span)
                if not accepted(option, every_capcon_option() | OTHER_TOOLS_OPTIONS)
            ]
    return problems


# --- JSON keys ------------------------------------------------------------------------------------------------

# docs/reference.md's "JSON output" section: each subsection and the command output its keys are checked on.
JSON_SUBSECTIONS = {
    "`capcon plan --json`": "plan",
    "`capcon plan --schedule --format json`": "schedule",
    "`capcon watch --once --json`": "watch",
    "`capcon history --json`": "history",
    "`capcon whatif --json`": "whatif",
}


def json_subsections(path: Path) -> dict[str, list[str]]:
    """Each subsection of the "JSON output" section and the keys it names in backticks: a bare key, a key
    family (`expected_*`, kept with its star), or the keys of a JSON fragment (`{"active": [...]}`)."""
    sections: dict[str, list[str]] = {}
    inside, current = False, None
    for _, text in paragraphs(split_page(path)[0]):
        if match := HEADING.match(text):
            level, title = len(match.group(1)), match.group(2)
            if level == 2:
                inside = title == "JSON output"
            current = title if inside and level == 3 else None
            if current is not None:
                sections[current] = []
            continue
        if current is None:
            continue
        for span in code_spans(text):
            if span in JSON_LITERALS:
                continue
            if KEY.fullmatch(span) or (span.endswith("_*") and KEY.fullmatch(span[:-2])):
                sections[current].append(span)
            else:
                sections[current] += QUOTED_KEY.findall(span)
    return sections


def keys_of(document) -> set[str]:
    if isinstance(document, dict):
        return set(document).union(*(keys_of(v) for v in document.values()))
    if isinstance(document, list):
        return set().union(*(keys_of(v) for v in document))
    return set()


def capcon_in_process(*argv: str) -> dict:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(list(argv))
    assert code == 0, (argv, printed.getvalue())
    return json.loads(printed.getvalue())


def capcon_process(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "console", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def finished_json(process: subprocess.Popen, timeout: float = 120) -> dict:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, (process.args, out[-2000:], err[-2000:])
    return json.loads(out)


def fleet_plans(folder: Path, urls: list[str], gateway: str, gpu_page: str) -> tuple[Path, Path]:
    """Two plans on the simulated fleet, one replica each. The first also names a port nothing listens on, so its
    replica_down flag is pending and the pending flags' keys are printed; the second has a gateway in front, so
    what its clients saw is printed, and its replica's dcgm-exporter page, so its GPU counters are."""
    text = (ROOT / SIM_PLAN).read_text()
    first = folder / "first.yaml"
    first.write_text(text + f"\nfleet: {{targets: [{urls[0]}, http://127.0.0.1:1]}}\n")
    second = folder / "second.yaml"
    second.write_text(
        text.replace("name: internal-assistant-18rps", "name: second-fleet", 1)
        + f"\nfleet: {{targets: [{urls[1]}], gateways: [{gateway}], dcgm_targets: [{gpu_page}]}}\n"
    )
    return first, second


def start_gateway(target: str) -> tuple[subprocess.Popen, str]:
    """`capcon gateway` in front of one replica, on a free port: the process and its URL."""
    process = capcon_process("gateway", "--target", target, "--listen", "127.0.0.1:0")
    for line in process.stdout:
        if match := re.search(r"listening on (http://\S+)", line):
            threading.Thread(target=process.stdout.read, daemon=True).start()  # the pipe never fills
            return process, match[1]
    process.kill()
    raise AssertionError(f"capcon gateway did not start: {process.stderr.read()[-2000:]}")


@pytest.fixture(scope="module")
def printed_keys(tmp_path_factory) -> dict[str, set[str]]:
    """The keys each command prints: `watch --once` and `record` as processes against a two-replica simulated
    fleet, the plans and `history` (on what `record` wrote) in-process meanwhile. A few seconds."""
    folder = tmp_path_factory.mktemp("json")
    sizes = capcon_process("plan", "plans/assistant-70b.yaml", "--json", "--sizes")  # seconds of simulation
    sim, urls, lines = start_sim(SIM_PLAN, "--replicas", "2", "--status-every", "0")
    gpu_page = next(m[1] for line in lines if (m := re.match(r"\s+replica 1: (http://\S+)$", line.rstrip())))
    gateway, gateway_url = start_gateway(urls[1])
    try:
        first, second = fleet_plans(folder, urls, gateway_url, gpu_page)
        history = folder / "history.sqlite"
        watch = capcon_process("watch", str(first), str(second), "--once", "--json", "--interval", "0.2")
        record = capcon_process("record", str(second), "--db", str(history), "--duration", "1.5", "--interval", "1")
        plans = capcon_in_process("plan", *SHIPPED_PLANS, "--json", "--schedule")
        schedule = capcon_in_process("plan", SIM_PLAN, "--schedule", "--format", "json")
        _, err = record.communicate(timeout=120)
        assert history.exists(), err  # its exit status is the recording's business, not this test's
        summarised = capcon_in_process("history", "--db", str(history), "--json", "--by", "hour")
        compared = capcon_in_process("history", "--db", str(history), "--json", "--plan", str(second))
        backtested = capcon_in_process("history", "--db", str(history), "--json", "--backtest")
        # On the plan alone, a minute at 5 rps: well under a second of simulation.
        whatif = capcon_in_process("whatif", SIM_PLAN, "--rps", "5", "--minutes", "1", "--replicas", "+1", "--json")
        watched = finished_json(watch)
    finally:
        for process in (gateway, sim):
            process.terminate()
            process.wait(30)
    return {
        "plan": keys_of(plans) | keys_of(finished_json(sizes)),
        "schedule": keys_of(schedule),
        "watch": keys_of(watched),
        "history": keys_of(summarised) | keys_of(compared) | keys_of(backtested),
        "whatif": keys_of(whatif),
    }


def missing_keys(named: list[str], printed: set[str]) -> list[str]:
    return [
        key
        for key in named
        if not (any(k.startswith(key[:-1]) for k in printed) if key.endswith("*") else key in printed)
    ]


# --- the tests ------------------------------------------------------------------------------------------------


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_option_a_page_names_exists_where_it_says(page):
    assert option_problems(page) == []


def test_every_json_key_the_reference_lists_is_printed(printed_keys):
    sections = json_subsections(REFERENCE)
    assert set(JSON_SUBSECTIONS) <= set(sections), (
        f"docs/reference.md's JSON output lacks {set(JSON_SUBSECTIONS) - set(sections)}"
    )
    named_elsewhere = {title: keys for title, keys in sections.items() if title not in JSON_SUBSECTIONS and keys}
    assert named_elsewhere == {}, "keys under a heading this test runs no command for"
    assert all(sections[title] for title in JSON_SUBSECTIONS), "a subsection that names no key checks nothing"
    missing = {title: missing_keys(sections[title], printed_keys[output]) for title, output in JSON_SUBSECTIONS.items()}
    assert missing == {title: [] for title in JSON_SUBSECTIONS}


def test_the_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES
    first_image = next(n for n, line in enumerate(lines, 1) if IMAGE.search(line))
    assert first_image < README_SCREENSHOT_BEFORE_LINE
    prose, _ = split_page(README)
    long_cells = [
        f"README.md:{n}: {cell.strip()[:60]}..."
        for n, line in prose
        if line.startswith("|")
        for cell in re.split(r"(?<!\\)\|", line)
        if len(cell.strip()) > README_MAX_CELL
    ]
    assert long_cells == []


def test_the_readme_links_every_docs_page():
    prose, _ = split_page(README)
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for _, text in paragraphs(prose)
        for target in LINK.findall(without_code_spans(text))
    }
    assert [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_prose_line_is_a_wall_of_text(page):
    prose, _ = split_page(page)
    assert [n for n, line in prose if not line.startswith("|") and len(line) > MAX_PROSE_LINE] == []


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=page_id)
def test_every_page_opens_with_a_title_and_what_it_is_for(page):
    lines = [line for line in page.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines[0].startswith("# ")
    assert not re.match(r"#|\||!\[|```|[-*] |\d+\. ", lines[1]), "the first paragraph says what the page is for"


def test_the_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Real heading\n\n"
        "[here](#real-heading) [gone](#no-such-heading) [missing](nowhere.md)\n\n"
        "Run `capcon plan FILE --schedule`, `capcon plan FILE --once`, `capcon overflow set pass --json`,\n"
        "`watch --twice`, `--no-such-option`, `--keep-*`, `capcon overflow status\\|set --reason x`,\n"
        "`benchmarks/bench_history.py --quick --slow` and `benchmarks/bench_none.py`.\n\n"
        "```\ncapcon history --by day   # --comment-is-not-checked\ncapcon rules PLAN --sizes\n```\n"
    )
    assert [p.split(": ", 1)[1] for p in broken_links(page)] == [
        "#no-such-heading: no heading 'no-such-heading' in page.md",
        "nowhere.md: no such file",
    ]
    assert [p.split(": ", 2)[-1] for p in option_problems(page)] == [
        "--sizes is not an option of capcon rules",
        "--once is not an option of capcon plan",
        "--json is not an option of capcon overflow set",
        "--twice is not an option of capcon watch",
        "--no-such-option is no verb's option nor a listed tool's",
        "--slow is not an option of benchmarks/bench_history.py",
        "benchmarks/bench_none.py: no such script",
    ]
    assert slug("`capcon gateway`: the fleet's front door") == "capcon-gateway-the-fleets-front-door"
    assert missing_keys(["plan", "expected_*", "nope"], {"plan", "expected_concurrency"}) == ["nope"]
