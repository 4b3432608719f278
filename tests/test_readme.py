"""The README and the pages in docs/ as a user meets them: the code they mark runnable runs,
the commands they show exist with the options they show, and their relative links resolve.

A runnable block is a ```python fence with `<!-- runnable -->` on the line just before it.
It must run on its own (imports included) on a CPU in seconds; each runs in a fresh
interpreter with a timeout.

Commands are read from fences tagged bash, sh, shell or console and from inline code spans
that start with `python `. A line (comments dropped, `\\` continuations joined, leading
`VAR=value` assignments skipped) is split into commands at `&&`, `||`, `;` and `|`. Then:
- `python -m gradstream.X [SUB] --opt ...`: `python -m gradstream.X [SUB] --help` succeeds and
  lists every `--opt`; SUB counts only where the help offers it as a choice, and whatever
  follows a script (`train.py`) or `-m module` belongs to that script and is not checked;
- `python path/script.py --opt ...`, `bash path` and a command that is itself a path
  (`tools/x.sh`): the file exists in the repository and each `--opt` appears in its source;
- anything else (pip, maturin, cargo, pytest, torchrun, git, ...) is another project's tool
  and is skipped.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

import gradstream

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"
SHELL_TAGS = {"bash", "sh", "shell", "console"}
FENCE = re.compile(
    r"^(?P<fence>```+|~~~+)(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S
)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
OPTION = re.compile(r"^--?[A-Za-z][\w-]*")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fences(path: Path):
    """(info string, body, preceding non-blank line) for every fenced block of a page."""
    text = path.read_text()
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip().rsplit("\n", 1)[-1].strip()
        yield m.group("info").strip(), m.group("body"), before


def prose(path: Path) -> str:
    """A page without its fenced blocks."""
    return FENCE.sub("", path.read_text())


def runnable_blocks():
    for page in PAGES:
        for i, (info, body, before) in enumerate(fences(page)):
            if before == MARKER:
                assert info.split()[:1] == ["python"], (
                    f"{rel(page)}: {MARKER} before a {info!r} block"
                )
                yield pytest.param(body, id=f"{rel(page)}#{i}")


def child_env() -> dict[str, str]:
    package_root = str(Path(gradstream.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=package_root + (os.pathsep + path if path else ""))


@pytest.mark.cpu_backend("runs the examples in child processes, as a user would")
@pytest.mark.parametrize("code", list(runnable_blocks()))
def test_runnable_block_runs(code, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_readme_has_a_runnable_block():
    assert any(before == MARKER for _, _, before in fences(ROOT / "README.md"))


# ---- commands ----


def command_lines(path: Path):
    for info, body, _ in fences(path):
        if info.split()[:1] and info.split()[0] in SHELL_TAGS:
            yield from body.replace("\\\n", " ").splitlines()
    for m in INLINE.finditer(prose(path)):
        span = m.group(2).strip()
        if span.startswith("python "):
            yield span


def commands(line: str):
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words: list[str] = []
    for tok in lex:
        if tok in {"&&", "||", ";", "|", "&"}:
            if words:
                yield words
            words = []
        else:
            words.append(tok)
    if words:
        yield words


def all_commands():
    seen = set()
    for page in PAGES:
        for line in command_lines(page):
            for words in commands(line):
                while words and re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]):
                    words = words[1:]
                key = tuple(words)
                if words and key not in seen:
                    seen.add(key)
                    yield pytest.param(words, id=f"{rel(page)}: {shlex.join(words)}"[:120])


def options(words: list[str]) -> list[str]:
    return [m.group(0) for w in words if (m := OPTION.match(w))]


@functools.cache
def module_help(module: str, sub: tuple[str, ...]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", module, *sub, "--help"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"python -m {module} {' '.join(sub)} --help: {proc.stderr[-2000:]}"
    return proc.stdout + proc.stderr


def choices(help_text: str) -> set[str]:
    return {c for group in re.findall(r"\{([\w,-]+)\}", help_text) for c in group.split(",")}


def check_module(module: str, args: list[str]) -> None:
    sub: list[str] = []
    checked: list[str] = []
    for i, w in enumerate(args):
        if w.startswith("-"):
            if w == "-m":
                break
            checked.append(w)
        elif not checked and w in choices(module_help(module, tuple(sub))):
            sub.append(w)
        elif w.endswith(".py") and (i == 0 or not args[i - 1].startswith("-")):
            break  # a script's own arguments follow
    help_text = module_help(module, tuple(sub))
    for opt in options(checked):
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", help_text), (
            f"python -m {module} {' '.join(sub)} --help does not list {opt}"
        )


def check_file(path: str, args: list[str]) -> None:
    target = ROOT / path
    assert target.is_file(), f"{path} is not a file in the repository"
    source = target.read_text()
    for opt in options(args):
        assert opt in source, f"{path} has no option {opt}"


@pytest.mark.parametrize("words", list(all_commands()))
def test_command_exists_with_its_options(words):
    head, args = words[0], words[1:]
    if head in {"python", "python3"}:
        if args[:1] == ["-m"] and args[1:2] and args[1].startswith("gradstream"):
            check_module(args[1], args[2:])
        elif args and args[0].endswith(".py"):
            check_file(args[0], args[1:])
        else:
            pytest.skip("not a gradstream module or a repository script")
    elif head == "bash" and args and "/" in args[0]:
        check_file(args[0], args[1:])
    elif "/" in head and not head.startswith(("/", "~", "$")):
        check_file(head, args)
    else:
        pytest.skip(f"{head}: another project's tool")


def test_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    marker = next(i for i, line in enumerate(ci) if line.startswith("echo \"== the README's test"))
    ci_command = ci[marker + 1].strip()
    assert f'pip install ".[test]" && {ci_command}' in (ROOT / "README.md").read_text()
    assert 'pip install ".[test]"' in (ROOT / ".ci" / "run").read_text()


# ---- links ----


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in {"L", "N"})
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in prose(path).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            base, n = slug(m.group(1)), 1
            name = base
            while name in found:
                name, n = f"{base}-{n}", n + 1
            found.add(name)
    return found


def links():
    for page in PAGES:
        text = INLINE.sub("", prose(page))
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            yield pytest.param(page, target, id=f"{rel(page)} -> {target}")


@pytest.mark.parametrize(("page", "target"), list(links()))
def test_relative_link_resolves(page, target):
    path, _, fragment = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{rel(page)} links to {target}: no such file"
    assert file.is_relative_to(ROOT), f"{rel(page)} links outside the repository: {target}"
    if fragment and file.suffix == ".md":
        assert fragment in anchors(file), f"{rel(page)} links to {target}: no such heading"
