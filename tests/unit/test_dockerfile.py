"""The Dockerfile, read as docker reads it: its base images match pyproject's Python, every
COPY source exists and carries what the wheel build needs, and its ENTRYPOINT + CMD run
(the console script pyproject names, called in this venv with `--help`), so a renamed
module or command breaks this test rather than the image at its first start."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]


@dataclass(frozen=True)
class Instruction:
    name: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """Dockerfile instructions: comments dropped, backslash continuations joined."""
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        line = pending + line
        pending = ""
        name, _, args = line.partition(" ")
        out.append(Instruction(name.upper(), args.strip()))
    assert not pending, "a continuation line ends the Dockerfile"
    return out


def exec_form(args: str) -> list[str]:
    """ENTRYPOINT / CMD in exec form (a JSON array), the only form that gets signals."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


DOCKERFILE = instructions((ROOT / "Dockerfile").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def only(name: str) -> Instruction:
    found = [i for i in DOCKERFILE if i.name == name]
    assert len(found) == 1, (name, found)
    return found[0]


def test_the_parser_reads_continuations_and_comments() -> None:
    parsed = instructions('# c\nFROM a AS b\nRUN x \\\n  && y\n\nCMD ["run"]\n')
    assert parsed == [
        Instruction("FROM", "a AS b"),
        Instruction("RUN", "x && y"),
        Instruction("CMD", '["run"]'),
    ]


def test_base_images_are_a_python_pyproject_allows() -> None:
    froms = [i.args for i in DOCKERFILE if i.name == "FROM"]
    assert len(froms) == 2  # build stage and runtime stage
    floor = re.fullmatch(r">=\s*3\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert floor is not None
    for image in froms:
        match = re.match(r"python:3\.(\d+)", image)
        assert match is not None, image
        assert int(match.group(1)) >= int(floor.group(1)), image


def test_copy_sources_exist_and_include_what_the_wheel_build_reads() -> None:
    copied: set[str] = set()
    for copy in (i for i in DOCKERFILE if i.name == "COPY"):
        parts = copy.args.split()
        if parts[0].startswith("--from="):
            continue  # from the build stage, not the context
        *sources, _dest = parts
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            copied.add(source.rstrip("/"))
    project = PYPROJECT["project"]
    needed = {"pyproject.toml", project["readme"], *project["license-files"], "gpusched"}
    assert needed <= copied, needed - copied


def test_the_entrypoint_runs_in_the_venv() -> None:
    entrypoint = exec_form(only("ENTRYPOINT").args)
    cmd = exec_form(only("CMD").args)
    assert entrypoint == ["gpusched"] and cmd == ["run"]
    # The console script pip installs for ENTRYPOINT[0], called as its wrapper calls it.
    target = PYPROJECT["project"]["scripts"][entrypoint[0]]
    module, _, function = target.partition(":")
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code, *entrypoint[1:], *cmd, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: "), result.stdout
    # The flags the Deployment passes to that command exist.
    for flag in ("--config", "--metrics-port"):
        assert flag in result.stdout
