"""Fenced code blocks of README.md and docs/*.md, and shell commands split out of them.

Used by ``tests/test_docs_snippets.py``. A block may carry a marker on the last non-blank
line before its opening fence, ``<!-- snippet: KIND -->``, saying what it is or why it is not
run; :data:`MARKERS` lists the kinds. Everything is parsed here so that a failure can name
the file, line and text of the snippet it is about.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<kind>[\w-]+)\s*(?::\s*(?P<why>.*?))?\s*-->\s*$")

SHELL = {"sh", "shell", "bash", "console"}
YAML = {"yaml", "yml"}
PROMQL = {"promql"}
OTHER = {"text", "mermaid", "json", "python", "ini", "toml", "dockerfile", "go"}

MARKERS = {
    # YAML kinds (an unmarked YAML block is an exporter configuration, unless it holds
    # scrape_configs, which makes it a Prometheus configuration)
    "exporter-config": "loaded with the daemon's config loader (exporter.wiring.config.build)",
    "prometheus-config": "promtool check config, and the job label the mixin selects",
    "helm-values": "rendered with the chart (Helm's engine, values.schema.json)",
    "pod-fragment": "a piece of a pod spec: its serving.goodput.dev/ annotations must exist",
    # any block
    "not-run": "not run at all; say why after a colon",
    "partly-run": "shell: run the lines the test can run, skip those needing a cluster, "
    "registry, root or network; say why after a colon",
    "as-written": "shell: pasted whole into bash (every line must succeed) in a fresh copy of "
    "the checkout with no virtualenv activated, by a test of tests/test_docs_snippets.py "
    "that checks what it prints (AS_WRITTEN there)",
}
NEEDS_WHY = {"not-run", "partly-run"}


@dataclass(frozen=True)
class Snippet:
    path: str  # relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str = ""
    why: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def __str__(self) -> str:
        return f"{self.where} ({self.lang or 'untagged'})"


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")),
            *sorted((root / "docs" / "runbooks").glob("*.md")),
            *sorted((root / "exporter" / "runbooks").glob("*.md")),  # served at /runbooks/
            root / "helm" / "gpu-goodput-exporter" / "README.md"]  # helm show readme


def snippets(path: Path, root: Path = REPO) -> list[Snippet]:
    """Every fenced block of one Markdown file, with the marker before it (if any)."""
    rel = str(path.relative_to(root))
    lines = path.read_text().splitlines()
    out: list[Snippet] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence, indent = i, m["fence"], len(m["indent"])
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        marker = why = ""
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and (mm := MARKER.match(lines[j])):
            marker, why = mm["kind"], (mm["why"] or "")
        out.append(Snippet(rel, start + 1, m["lang"].lower(), "\n".join(body), marker, why))
        i += 1
    return out


def all_snippets(root: Path = REPO) -> list[Snippet]:
    return [s for path in doc_files(root) for s in snippets(path, root)]


@dataclass
class Command:
    """One logical shell command: continuation lines joined, comment dropped."""

    line: int  # 1-based line in the document
    text: str  # as written (continuations joined)
    words: list[str]
    env: dict[str, str] = field(default_factory=dict)
    background: bool = False
    heredoc: str = ""  # body of a here-document, if any
    comment: str = ""

    @property
    def program(self) -> str:
        return Path(self.words[0]).name if self.words else ""


_HEREDOC = re.compile(r"<<-?\s*'?\"?(?P<tag>\w+)'?\"?")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def commands(snippet: Snippet) -> list[Command]:
    """The shell commands of a block, in order. Raises ValueError on unbalanced quotes."""
    lines = snippet.text.splitlines()
    out: list[Command] = []
    i = 0
    while i < len(lines):
        first = i
        text = lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        heredoc = ""
        if m := _HEREDOC.search(text):
            body = []
            while i < len(lines) and lines[i].strip() != m["tag"]:
                body.append(lines[i])
                i += 1
            i += 1  # the terminator
            heredoc = "\n".join(body) + "\n"
            text = text[: m.start()] + text[m.end() :]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError as exc:
            raise ValueError(f"line {snippet.line + 1 + first}: {exc}: {text}") from None
        comment = text.split(" #", 1)[1].strip() if " #" in text else ""
        env: dict[str, str] = {}
        while words and _ASSIGN.match(words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        background = bool(words) and words[-1] == "&"
        if background:
            words.pop()
        out.append(Command(snippet.line + 1 + first, text.strip(), words, env, background,
                           heredoc, comment))
    return out
