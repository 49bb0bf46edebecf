"""Full-precision float prints in stored outputs that nbval compares (issue 34, item 3).

The slow tier compares each solution notebook's stored outputs with a fresh run's, cell by cell
(every cell not tagged ``nbval-ignore-output``, ``nbval-skip``, ``check`` or ``answer``). A float
printed with many significant digits, or a tiny value such as a rounding error (``1.6e-14``),
differs in its last digits between CPUs, BLAS builds and thread counts, and fails that
comparison. This module lists such prints:

    python -m course_utils.authoring.float_prints solutions/*.ipynb

A print is flagged when a compared output holds a number with ``min_digits`` or more
significant digits (``0.9999998807907104``), or a number in scientific notation below
``tiny`` (1e-5) in magnitude with a mantissa (``1.5e-14``, ``4.2e-07``: a rounding error
printed as a value; a bare threshold such as ``1e-10`` is not flagged).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat

NOT_COMPARED_TAGS = ("nbval-ignore-output", "nbval-skip", "check", "answer")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+\.\d+|\d+)(e[-+]?\d+)?(?![\w.])", re.I)


@dataclass(frozen=True)
class FloatPrint:
    notebook: str
    cell: int
    cell_id: str
    number: str
    line: str

    def __str__(self) -> str:
        return (
            f"{self.notebook} cell {self.cell} ({self.cell_id}): {self.number!r} in {self.line!r}"
        )


def _significant_digits(mantissa: str) -> int:
    digits = mantissa.replace(".", "").lstrip("0")
    return len(digits)


def flagged(number: re.Match, min_digits: int, tiny: float) -> bool:
    mantissa, exponent = number.group(1), number.group(2)
    if exponent:  # a measured tiny value has a mantissa (1.5e-14); a threshold rarely does (1e-10)
        value = abs(float(number.group(0)))
        return "." in mantissa and 0 < value < tiny
    return "." in mantissa and _significant_digits(mantissa) >= min_digits


def _texts(cell) -> Iterator[str]:
    for out in cell.get("outputs", []):
        if "text" in out:
            yield out["text"] if isinstance(out["text"], str) else "".join(out["text"])
        for mime, value in out.get("data", {}).items():
            if mime.startswith("text/") and mime != "text/html":
                yield value if isinstance(value, str) else "".join(value)


def scan(path: Path, min_digits: int = 9, tiny: float = 1e-5) -> list[FloatPrint]:
    """The flagged prints of one notebook's compared outputs."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if any(t in tags for t in NOT_COMPARED_TAGS):
            continue
        for text in _texts(cell):
            for line in text.splitlines():
                for m in _NUMBER.finditer(line):
                    if flagged(m, min_digits, tiny):
                        found.append(
                            FloatPrint(
                                path.name, i, cell.get("id", ""), m.group(0), line.strip()[:160]
                            )
                        )
    return found


def scan_all(paths: Iterable[Path], **kwargs) -> list[FloatPrint]:
    return [p for path in paths for p in scan(Path(path), **kwargs)]


def main(argv: list[str] | None = None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    found = scan_all(Path(p) for p in paths)
    for f in found:
        print(f)
    print(f"{len(found)} full-precision float print(s) in compared outputs")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
