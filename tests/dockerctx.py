"""What the Dockerfile puts in the image, read from the Dockerfile and .dockerignore themselves.

Used by the deployment tests (tests/unit/test_dockerfile.py, tests/e2e/test_image.py) to
rebuild the image's ``/app`` in a plain directory without a container engine: the build
context (the tree minus ``.dockerignore``, with Docker's pattern rules: ``*`` within one path
segment, ``**`` across segments, a pattern that matches a folder excludes what is inside it,
``!`` re-includes, the last matching line wins), then every ``COPY``/``ADD`` line applied to it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class _Pattern:
    regex: re.Pattern[str]
    negated: bool
    text: str


def _compile(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape("["))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])  # the class alone
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


class DockerIgnore:
    """``.dockerignore`` as Docker applies it to the build context."""

    def __init__(self, text: str) -> None:
        self.patterns: list[_Pattern] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            cleaned = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
            self.patterns.append(_Pattern(_compile(cleaned), negated, cleaned))

    def excluded(self, rel: str) -> bool:
        parts = PurePosixPath(rel).parts
        candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        result = False
        for pattern in self.patterns:
            if any(pattern.regex.match(c) for c in candidates):
                result = not pattern.negated
        return result

    def may_reinclude_under(self, rel: str) -> bool:
        return any(p.negated and (p.text.startswith(rel + "/") or "*" in p.text) for p in self.patterns)


def build_context(root: Path = REPO) -> list[str]:
    """Every file of the build context, as paths relative to ``root``."""
    ignore_file = root / ".dockerignore"
    ignore = DockerIgnore(ignore_file.read_text() if ignore_file.exists() else "")
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        base = "" if base == "." else base + "/"
        dirnames[:] = [
            d for d in dirnames if not ignore.excluded(base + d) or ignore.may_reinclude_under(base + d)
        ]
        files.extend(base + f for f in filenames if not ignore.excluded(base + f))
    return sorted(files)


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    args: str


def instructions(dockerfile: Path = REPO / "Dockerfile") -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    return out


def build_args(dockerfile: Path = REPO / "Dockerfile") -> dict[str, str]:
    """Every ``ARG NAME=default``."""
    found: dict[str, str] = {}
    for ins in instructions(dockerfile):
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            found[name.strip()] = default.strip().strip('"')
    return found


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), text)


def _copy_sources(ins: Instruction) -> tuple[list[str], str]:
    args = ins.args
    if args.startswith("["):
        import json

        words = list(json.loads(args))
    else:
        words = [w for w in shlex.split(args) if not w.startswith("--")]
    if any(w.startswith("--from") for w in shlex.split(args)):
        raise AssertionError(f"multi-stage COPY is not reproduced here: {ins}")
    return words[:-1], words[-1]


def assemble_app(target: Path, *, root: Path = REPO, dockerfile: Path | None = None) -> Path:
    """Lay out what the Dockerfile's COPY/ADD lines put in the image; returns its WORKDIR
    (under ``target``)."""
    dockerfile = dockerfile or root / "Dockerfile"
    context = build_context(root)
    context_set = set(context)
    workdir = PurePosixPath("/")
    for ins in instructions(dockerfile):
        if ins.keyword == "WORKDIR":
            workdir = workdir / ins.args
        if ins.keyword not in ("COPY", "ADD"):
            continue
        sources, dest = _copy_sources(ins)
        dest_dir = target / (workdir / dest).relative_to("/")
        for source in sources:
            src = os.path.normpath(source).lstrip("/")
            src = "" if src == "." else src
            matched = (
                [f for f in context if fnmatch.fnmatchcase(f, src)] if any(c in src for c in "*?[") else []
            )
            if src in context_set or matched:  # one file (or a glob of files) into dest
                for rel in matched or [src]:
                    to = dest_dir / Path(rel).name if dest.endswith("/") or len(sources) > 1 else dest_dir
                    to.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(root / rel, to)
                continue
            prefix = src + "/" if src else ""
            inside = [f for f in context if f.startswith(prefix)]
            if not inside:
                raise AssertionError(f"{ins.keyword} {ins.args}: {source!r} is not in the build context")
            for rel in inside:  # a folder: its contents into dest
                to = dest_dir / rel[len(prefix) :]
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / rel, to)
    return target / workdir.relative_to("/")


def project_install_run(dockerfile: Path = REPO / "Dockerfile") -> str:
    """The ``pip install .[...]`` argument of the RUN line that installs the project."""
    args = build_args(dockerfile)
    for ins in instructions(dockerfile):
        if ins.keyword != "RUN" or "pip install" not in ins.args:
            continue
        for word in shlex.split(expand(ins.args, args)):
            if word == "." or word.startswith(".["):
                return word
    raise AssertionError("no RUN line installs the project (pip install .)")
