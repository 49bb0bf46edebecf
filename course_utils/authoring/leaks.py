"""The no-answer rule: no line of a solution may appear in the student notebook.

An exercise's instructions state the goal, the math, the shapes and the edge cases, never a line
of the reference code; help comes as progressive hints. This module enforces the first half:
``course release --check`` fails when a line of a ``### BEGIN SOLUTION`` ... ``### END
SOLUTION`` region of ``solutions/NN_x.ipynb`` appears anywhere in the student version of that
notebook (markdown included), and names the notebook, exercise, line and cell.

What counts as a leak, precisely. Each code line of a solution region gives one or two
**needles**: the line itself and, for an assignment (``a = expr``, ``a += expr``) or a
``return expr``, the expression ``expr`` (a prompt that says "use ``x.max(dim=-1)``" gives the
answer away as surely as the whole line would). Comparison ignores whitespace and comments. A
needle is **trivial** and not searched when it is shorter than :data:`MIN_CHARS` characters
(whitespace removed), is a bare name or a ``return`` of bare names (``return out, w``), is a
block header (``for t in range(T):``, ``else:``) or a keyword statement (``pass``, ``break``),
or appears in the scaffold of its own exercise cell (the code around the region that the
student sees anyway). Every other needle is searched in every cell of the student notebook
(code and markdown, whole text, whitespace removed); each hit is a :class:`Leak`.

There is deliberately no allowlist: reword the prose or rewrite the later cell to use the
student's function (``fallback``) instead.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from course_utils.authoring.cells import cell_source, exercise_id
from course_utils.authoring.regions import find_regions

MIN_CHARS = 12  # needles shorter than this (whitespace removed) are too common to mean anything

_WS = re.compile(r"\s+")
_NAMES = re.compile(r"^(?:return\s*)?[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*,?$")
_HEADER = re.compile(r"^(?:for|if|elif|else|while|with|try|except|finally|def|class|async)\b.*:$")
_KEYWORD = re.compile(r"^(?:pass|break|continue|return|raise|yield)$")


@dataclass(frozen=True)
class Leak:
    """A line of ``exercise``'s solution found in cell ``cell_id`` of the student notebook."""

    notebook: str  # solution file name, e.g. "03_scaled_dot_product.ipynb"
    exercise: str  # the exercise id of the region the line comes from, e.g. "03.1"
    line: str  # the solution line (stripped), or the expression found when only it leaked
    cell_id: str
    cell_index: int
    cell_type: str

    def message(self) -> str:
        """One line for a report: notebook, exercise, cell and the leaked code."""
        return (
            f"{self.notebook}: exercise {self.exercise}: solution line {self.line!r} appears "
            f"in {self.cell_type} cell {self.cell_id!r} (#{self.cell_index})"
        )


def _squash(text: str) -> str:
    return _WS.sub("", text)


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` inside a string is kept)."""
    if "#" not in line:
        return line.strip()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return line.split("#", 1)[0].strip()  # an unclosed bracket: the line is part of more
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            return line.strip()[: tok.start[1]].rstrip()
    return line.strip()


def is_trivial(code: str) -> bool:
    """True for a needle too common to reveal an answer (see the module docstring)."""
    code = code.strip()
    return (
        len(_squash(code)) < MIN_CHARS
        or bool(_NAMES.match(code))
        or bool(_HEADER.match(code))
        or bool(_KEYWORD.match(code))
        or code.startswith(('"""', "'''"))
    )


def needles(line: str) -> list[str]:
    """The searched forms of one solution line: the line, and the expression it assigns or
    returns; comments dropped, trivial forms left out."""
    code = strip_comment(line)
    forms = [code]
    try:
        tree = ast.parse(code)
    except SyntaxError:  # part of a statement spread over several lines
        tree = None
    if tree is not None and len(tree.body) == 1:
        stmt = tree.body[0]
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)):
            if stmt.value is not None:
                forms.append(ast.get_source_segment(code, stmt.value) or "")
    return [f.strip() for f in forms if f.strip() and not is_trivial(f)]


def _solution_lines(cell: Mapping[str, Any]) -> tuple[list[str], str]:
    """The code lines inside the cell's solution regions, and the rest of the cell (scaffold)."""
    lines = cell_source(cell).split("\n")
    regions, _ = find_regions(cell_source(cell))
    inside: set[int] = set()
    for r in regions:
        inside.update(range(r.begin, r.end + 1))
    solution = [lines[i] for r in regions for i in range(r.begin + 1, r.end)]
    scaffold = "\n".join(strip_comment(ln) for i, ln in enumerate(lines) if i not in inside)
    return solution, scaffold


def find_leaks(
    solution: Mapping[str, Any], student: Mapping[str, Any], name: str = "notebook"
) -> list[Leak]:
    """Every solution line of ``solution`` (a parsed ``.ipynb``) that appears in ``student``
    (its student version, parsed). One leak per (needle's line, student cell)."""
    targets = [
        (i, c.get("id") or f"#{i}", c.get("cell_type", "?"), _squash(cell_source(c)))
        for i, c in enumerate(student.get("cells", []))
    ]
    leaks: list[Leak] = []
    for cell in solution.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        lines, scaffold = _solution_lines(cell)
        if not lines:
            continue
        ex_id = exercise_id(cell) or "?"
        scaffold_sq = _squash(scaffold)
        for line in lines:
            found: set[int] = set()
            for needle in needles(line):
                sq = _squash(needle)
                if sq in scaffold_sq:
                    continue
                for index, cid, ctype, text in targets:
                    if index not in found and sq in text:
                        found.add(index)
                        shown = line.strip() if needle == strip_comment(line) else needle
                        leaks.append(Leak(name, ex_id, shown, cid, index, ctype))
    return leaks


# -- hint ladders that translate onto the solution (issue 32) ---------------------------------
# A hint may name the idea, the shapes and how to debug; it must not be the solution in
# pseudo-code, i.e. lines that map one to one onto the solution's statements. A hint line *maps
# onto* a statement when it names at least :data:`MAP_SHARE` of the words of what the statement
# computes (the identifiers of its expression, split at underscores, lower-cased, a plural ``s``
# dropped, a few prose words read as their code names, Python keywords and ubiquitous names left
# out), the statement having at least two. A *pseudo-code* hint (a code fence, an assignment
# arrow ``<-``/``←``, or the words "pseudo-code"/"outline") translates its exercise when its
# lines map onto :data:`MAX_MAPPED` statements or half of them (at least 2). A prose hint is
# read clause by clause, and a clause maps onto a statement of three words or more when it names
# :data:`PROSE_SHARE` of them; the ladder translates when its prose maps onto
# :data:`MAX_MAPPED_PROSE` statements or two thirds of them (at least 3).

MAP_SHARE = 0.5
MAX_MAPPED = 3
MAX_MAPPED_PROSE = 5
PROSE_SHARE = 0.75
_PSEUDO = re.compile(r"```|<-|←|:=|pseudo-?code|outline", re.I)
_DETAILS = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset(
    "and as assert break class continue def del elif else except false finally for from global "
    "if import in is lambda none nonlocal not or pass raise return true try while with yield "
    "self torch nn f dim keepdim shape size float int len range math x i j t".split()
)


@dataclass(frozen=True)
class HintMatch:
    """A line of ``exercise``'s hint ladder that maps onto one statement of its solution."""

    notebook: str
    exercise: str
    hint: str  # the hint's summary, e.g. "Hint 3 (pseudo-code)"
    hint_line: str
    statement: str
    pseudo: bool  # the hint is written as pseudo-code (see the section's comment)


_SAME = {  # a word of prose and the name code uses for it
    "maximum": "max",
    "minimum": "min",
    "exponential": "exp",
    "transposed": "transpose",
    "logarithm": "log",
    "values": "value",
    "amax": "max",
    "isfinite": "finite",
}


def _words(text: str) -> set[str]:
    out = set()
    for ident in _IDENT.findall(text):
        for part in ident.lower().split("_"):
            part = _SAME.get(part, part)
            if len(part) > 3 and part.endswith("s"):
                part = part[:-1]
            if part and part not in _COMMON:
                out.add(part)
    return out


def hint_ladders(nb: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(exercise id, summary, text)`` of every collapsed hint (``<details>`` whose summary
    starts with "Hint") in a markdown cell, for the first exercise cell after it."""
    cells = nb.get("cells", [])
    found = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown" or "<details>" not in cell_source(cell):
            continue
        ex_id = next(
            (exercise_id(c) for c in cells[i + 1 :] if exercise_id(c) and _solution_lines(c)[0]),
            None,
        )
        if ex_id is None:
            continue
        for summary, text in _DETAILS.findall(cell_source(cell)):
            if summary.strip().lower().startswith("hint"):
                found.append((ex_id, summary.strip(), text))
    return found


def _operation(code: str) -> str:
    """What a statement computes: the expression of an assignment or ``return``, else itself
    (pseudo-code renames variables freely, so the names assigned to do not count)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    if len(tree.body) == 1 and isinstance(tree.body[0], (ast.Assign, ast.AugAssign, ast.Return)):
        value = tree.body[0].value
        if value is not None:
            return ast.get_source_segment(code, value) or code
    return code


def _statements(nb: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each exercise's solution statements (comment-free, two or more words), by id."""
    out: dict[str, list[str]] = {}
    for cell in nb.get("cells", []):
        ex_id = exercise_id(cell)
        if cell.get("cell_type") != "code" or not ex_id:
            continue
        for line in _solution_lines(cell)[0]:
            code = strip_comment(line)
            if len(_words(_operation(code))) >= 2 and not code.startswith(('"""', "'''")):
                out.setdefault(ex_id, []).append(code)
    return out


def _maps(line: str, need: set[str], pseudo: bool) -> bool:
    """Whether a hint line names enough of a statement's words (see the section's comment)."""
    if pseudo:
        return len(need & _words(line)) >= MAP_SHARE * len(need)
    return len(need) >= 3 and len(need & _words(line)) >= PROSE_SHARE * len(need)


def hint_translations(nb: Mapping[str, Any], name: str = "notebook") -> list[HintMatch]:
    """Every (hint, solution statement) pair where a line of a hint of an exercise's ladder maps
    onto a statement of its solution (see :data:`MAP_SHARE`); one pair per hint and statement."""
    statements = _statements(nb)
    matches = []
    for ex_id, summary, text in hint_ladders(nb):
        pseudo = bool(_PSEUDO.search(summary + text))
        split = r"[\n;]" if pseudo else r"[\n;:.]\s"
        lines = [ln.strip() for ln in re.split(split, text) if _words(ln)]
        for stmt in statements.get(ex_id, []):
            need = _words(_operation(stmt))
            for ln in lines:
                if _maps(ln, need, pseudo):
                    matches.append(HintMatch(name, ex_id, summary, ln, stmt, pseudo))
                    break
    return matches


def translating_ladders(
    nb: Mapping[str, Any], name: str = "notebook"
) -> dict[str, list[HintMatch]]:
    """The exercises whose hint ladder translates onto their solution (see the section's
    comment), with the pairs that show it."""
    statements = _statements(nb)
    pseudo: dict[str, dict[str, HintMatch]] = {}
    every: dict[str, dict[str, HintMatch]] = {}
    for m in hint_translations(nb, name):
        every.setdefault(m.exercise, {}).setdefault(m.statement, m)
        if m.pseudo:
            pseudo.setdefault(m.exercise, {}).setdefault(m.statement, m)
    bad = {}
    for ex, found in pseudo.items():
        n = len(statements.get(ex, []))
        if len(found) >= MAX_MAPPED or (len(found) >= 2 and 2 * len(found) >= n) or n == len(found):
            bad[ex] = list(found.values())
    for ex, found in every.items():
        n = len(statements.get(ex, []))
        if len(found) >= MAX_MAPPED_PROSE or (len(found) >= 3 and 3 * len(found) >= 2 * n):
            bad.setdefault(ex, list(found.values()))
    return bad


# A generic hint (``Exercise.hint``: the message when no named mistake matches) is one string,
# not a ladder: it outlines the solution when its clauses map onto :data:`MAX_MAPPED_HINT`
# statements of the reference (the exercise's solution region and its reference function's
# source), or onto half of them (at least 2). A clause that is code (an assignment, a call, or
# arithmetic between names) maps onto a statement as pseudo-code does (half of its words, and
# two or more); a prose clause as a ladder's prose does (:data:`PROSE_SHARE` of its words, three
# words or more), and only through a word other than the parameters' names (the signature is in
# the prompt: "does the warmup reach max_lr at its last step?" asks, it does not outline).

MAX_MAPPED_HINT = 3
_TRY_VALUE = re.compile(r"\b[A-Za-z_]\w*\s*=\s*-?[\d.]+\b(?!\s*[-+*/(])")
_CODE_CLAUSE = re.compile(r"(?<![<>=!])=(?!=)|\w\(|[\w)\]]\s*[-+*/@]\s*[\w(]")


def source_statements(source: str) -> list[str]:
    """The statements of a function's or class's ``source``, one per logical line (two or more
    words of what they compute), docstrings, comments, ``def``/``class`` lines and bare names
    left out."""
    import textwrap

    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or isinstance(
            node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef, ast.If, ast.For, ast.While)
        ):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        code = ast.get_source_segment(text, node) or ""
        code = " ".join(strip_comment(ln) for ln in code.splitlines())
        if len(_words(_operation(code))) >= 2:
            out.append(code)
    return out


def parameter_names(source: str) -> set[str]:
    """The names of every parameter of the functions (methods) defined in ``source``."""
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names.update(x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs])
    return names


def _clause_maps(clause: str, need: set[str], given: set[str]) -> bool:
    if _CODE_CLAUSE.search(_TRY_VALUE.sub(" ", clause)):
        shared = need & _words(clause)
        return len(shared) >= 2 and len(shared) >= MAP_SHARE * len(need)
    shared = need & _words(_TRY_VALUE.sub(" ", clause))
    return len(need) >= 3 and len(shared) >= PROSE_SHARE * len(need) and bool(shared - given)


def hint_outline(
    hint: str, statements: list[str], parameters: set[str] = frozenset()
) -> list[tuple[str, str]]:
    """``(hint clause, statement)`` for each statement a clause of ``hint`` maps onto when the
    hint outlines ``statements`` (see the comment above), else empty. ``parameters``: the
    reference's parameter names."""
    given = _words(" ".join(parameters))
    clauses = [c.strip() for c in re.split(r"[\n;:?]\s*|[.,]\s+", hint) if _words(c)]
    found: dict[str, str] = {}
    for stmt in dict.fromkeys(statements):
        need = _words(_operation(stmt))
        clause = next((c for c in clauses if _clause_maps(c, need, given)), None)
        if clause is not None:
            found[stmt] = clause
    n = len(set(statements))
    if len(found) >= MAX_MAPPED_HINT or (len(found) >= 2 and 2 * len(found) >= n):
        return [(clause, stmt) for stmt, clause in found.items()]
    return []
