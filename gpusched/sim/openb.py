"""Loader for Alibaba's openb GPU cluster trace (cluster-trace-gpu-v2023, CSV format).

Two tables, read from a directory so that the trace itself never has to live in this
repository (it is data, CC BY 4.0, kept under ``shared/traces/openb``):

* node list ``sn,cpu_milli,memory_mib,gpu,model``;
* pod list ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time``. Some published variants (``multigpu*``) carry
  only the first five columns, so the remaining ones are optional.

Values are kept as the CSV states them; the writers (:func:`write_nodes`, :func:`write_pods`)
produce files the loaders read back unchanged (``gpusched variants write``). The conversions
the FGD simulator applies on top (``gpu_milli`` clamping, ``gpu_spec`` clean-up, dropping GPU
fields of CPU-only pods) belong to :mod:`gpusched.sim.fgd_workload`, so that other consumers
can see the raw trace.

This module depends on nothing else in ``gpusched``: it is plain Python on purpose, so that a
benchmark or a notebook can import it alone.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = [
    "DEFAULT_NODE_FILE",
    "DEFAULT_POD_FILE",
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "POD_REQUIRED_COLUMNS",
    "TraceFormatError",
    "TraceNode",
    "TracePod",
    "load_nodes",
    "load_pods",
    "write_nodes",
    "write_pods",
]

DEFAULT_NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_POD_FILE = "openb_pod_list_default.csv"

NODE_COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS: tuple[str, ...] = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_REQUIRED_COLUMNS: tuple[str, ...] = POD_COLUMNS[:5]

_T = TypeVar("_T")


class TraceFormatError(ValueError):
    """A malformed trace file; names the file, the 1-based line and, if known, the column."""

    def __init__(self, path: Path, line: int, column: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.column = column
        where = f"{path}:{line}"
        if column is not None:
            where += f": column {column!r}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One machine of the trace. ``model`` is empty for CPU-only nodes."""

    sn: str
    cpu_milli: int
    memory_mib: int
    gpu: int
    model: str


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of the trace, as written in the CSV.

    ``gpu_milli`` is the share of each requested GPU (0-1000); ``gpu_spec`` lists acceptable
    GPU models separated by ``|`` (empty: any model). Times are seconds from the trace start,
    ``None`` where the cell is empty or the column absent.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str = ""
    qos: str = ""
    pod_phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None


class _Row:
    """One data row with its position, so every conversion error can point at its cell."""

    __slots__ = ("_cells", "_line", "_path")

    def __init__(self, path: Path, line: int, cells: Mapping[str, str]) -> None:
        self._path = path
        self._line = line
        self._cells = cells

    def error(self, column: str | None, message: str) -> TraceFormatError:
        return TraceFormatError(self._path, self._line, column, message)

    def text(self, column: str, *, required: bool = True) -> str:
        value = self._cells.get(column, "").strip()
        if required and not value:
            raise self.error(column, "empty value")
        return value

    def count(self, column: str) -> int:
        """A non-negative integer cell (CPU milli, MiB, GPU counts)."""
        raw = self.text(column)
        try:
            value = int(raw)
        except ValueError:
            raise self.error(column, f"expected an integer, got {raw!r}") from None
        if value < 0:
            raise self.error(column, f"expected a non-negative integer, got {value}")
        return value

    def optional_count(self, column: str) -> int | None:
        return self.count(column) if self.text(column, required=False) else None


def _resolve(directory: str | os.PathLike[str], filename: str) -> Path:
    path = Path(directory) / filename
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path}")
    return path


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[_Row]:
    """Yield the data rows of ``path``, checking the header and each row's cell count."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        try:
            header = [cell.strip() for cell in next(reader)]
        except StopIteration:
            raise TraceFormatError(path, 1, None, "empty file, expected a header") from None
        except csv.Error as exc:
            raise TraceFormatError(path, reader.line_num, None, str(exc)) from None
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceFormatError(path, 1, missing[0], f"missing columns {missing}")
        duplicated = sorted({c for c in header if header.count(c) > 1})
        if duplicated:
            raise TraceFormatError(path, 1, duplicated[0], "duplicated column")
        line = reader.line_num
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise TraceFormatError(path, reader.line_num, None, str(exc)) from None
            # The first line of a record is the one a reader opens the file at; csv's
            # line_num is the last line consumed, which differs only for quoted newlines.
            start, line = line + 1, reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue  # a blank line (often the trailing one) is not a record
            if len(cells) != len(header):
                raise TraceFormatError(
                    path, start, None, f"expected {len(header)} cells, found {len(cells)}"
                )
            yield _Row(path, start, dict(zip(header, cells, strict=True)))


def _load(
    directory: str | os.PathLike[str],
    filename: str,
    required: tuple[str, ...],
    build: Callable[[_Row], tuple[str, _T]],
    key_column: str,
) -> list[_T]:
    path = _resolve(directory, filename)
    seen: set[str] = set()
    out: list[_T] = []
    for row in _rows(path, required):
        key, item = build(row)
        if key in seen:
            # The simulator keys nodes and pods by name; a repeat would silently merge two.
            raise row.error(key_column, f"duplicate {key!r}")
        seen.add(key)
        out.append(item)
    return out


def _node(row: _Row) -> tuple[str, TraceNode]:
    node = TraceNode(
        sn=row.text("sn"),
        cpu_milli=row.count("cpu_milli"),
        memory_mib=row.count("memory_mib"),
        gpu=row.count("gpu"),
        model=row.text("model", required=False),
    )
    if node.gpu > 0 and not node.model:
        raise row.error("model", f"a node with {node.gpu} GPUs needs a GPU model")
    return node.sn, node


def _pod(row: _Row) -> tuple[str, TracePod]:
    pod = TracePod(
        name=row.text("name"),
        cpu_milli=row.count("cpu_milli"),
        memory_mib=row.count("memory_mib"),
        num_gpu=row.count("num_gpu"),
        gpu_milli=row.count("gpu_milli"),
        gpu_spec=row.text("gpu_spec", required=False),
        qos=row.text("qos", required=False),
        pod_phase=row.text("pod_phase", required=False),
        creation_time=row.optional_count("creation_time"),
        deletion_time=row.optional_count("deletion_time"),
        scheduled_time=row.optional_count("scheduled_time"),
    )
    return pod.name, pod


def load_nodes(
    directory: str | os.PathLike[str], filename: str = DEFAULT_NODE_FILE
) -> list[TraceNode]:
    """Read a node list, in file order.

    Raises :class:`FileNotFoundError` if the file is absent and :class:`TraceFormatError`
    (file, line, column) for a malformed header or row.
    """
    return _load(directory, filename, NODE_COLUMNS, _node, "sn")


def load_pods(
    directory: str | os.PathLike[str], filename: str = DEFAULT_POD_FILE
) -> list[TracePod]:
    """Read a pod list, in file order. Columns after ``gpu_milli`` may be absent.

    Raises :class:`FileNotFoundError` if the file is absent and :class:`TraceFormatError`
    (file, line, column) for a malformed header or row.
    """
    return _load(directory, filename, POD_REQUIRED_COLUMNS, _pod, "name")


def _write(path: Path, columns: tuple[str, ...], rows: Iterator[tuple[object, ...]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle, lineterminator="\n")
        w.writerow(columns)
        w.writerows(["" if cell is None else cell for cell in row] for row in rows)
    return path


def write_nodes(path: str | os.PathLike[str], nodes: Iterable[TraceNode]) -> Path:
    """Write a node list that :func:`load_nodes` reads back unchanged."""
    return _write(
        Path(path), NODE_COLUMNS, ((n.sn, n.cpu_milli, n.memory_mib, n.gpu, n.model) for n in nodes)
    )


def write_pods(path: str | os.PathLike[str], pods: Iterable[TracePod]) -> Path:
    """Write a pod list (all columns) that :func:`load_pods` reads back unchanged."""
    rows = (tuple(getattr(p, c) for c in POD_COLUMNS) for p in pods)
    return _write(Path(path), POD_COLUMNS, rows)
