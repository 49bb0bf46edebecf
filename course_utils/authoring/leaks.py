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


# -- generic hints that outline the reference (issue 31) ----------------------------------------
# A generic hint (``Exercise.hint``: the message when no named mistake matches) is one string,
# not a ladder. It *outlines* the reference when its clauses map onto the reference's statements
# one by one, as the generic hints before issue 31 did ("encode the source once; start every
# row from BOS; ..."): onto :data:`MAX_MAPPED_HINT` statements of one implementation, or onto
# more than half of them (at least 2 of 3 or more). The implementations are the exercise's
# solution region (logical statements: a bracket left open continues the line) and its
# reference function's source (for a class, the methods the solution region writes).
#
# Both sides are read as *concepts*: identifiers split at underscores (as :func:`_words`), a
# prose word read as the code name it stands for ("source" src, "average" mean, "together" cat,
# "divided" divide, ...), code operators read as words (``/`` divide, ``@`` matmul, ``-``
# subtract, ...), ``q``/``k``/``v`` read as query/key/value, other one-letter names and English
# words that are also code names ("out", "one", "all") left out. A statement's concepts are those
# of what it computes, plus the names it assigns (prose names them: "the weights", "the
# context"), less the names the student chooses freely (``for`` loop variables, nested helpers'
# names and parameters). A clause maps onto a statement when it names a concept of the statement
# other than the reference's parameters' names (the signature is in the prompt), at least two of
# its concepts and at least half of what it computes beyond the parameters. A clause that asks
# (its sentence is a question) or sends the student to debug ("print ...", "compare ...", "write
# out ... by hand") maps only when it is code (an assignment, a call, arithmetic between names):
# "does the warmup reach max_lr at its last step?" asks, it does not outline; LaTeX math is the
# idea, not code. Each statement needs its own clause (a maximum matching), except that a clause
# of code may stand for two statements (a formula: ``exp(x - m) / sum(exp(x - m))``). Clauses
# end at ``;:?``, at a full stop or comma followed by a space, and at a line break.

MAX_MAPPED_HINT = 3
_TRY_VALUE = re.compile(r"\b[A-Za-z_]\w*\s*=\s*-?[\d.]+\b(?!\s*[-+*/(])")
# code: an assignment, a call, arithmetic between names (a hyphen inside a word is prose)
_CODE_CLAUSE = re.compile(r"(?<![<>=!])=(?!=)|\w\(|[\w)\]]\s*[+*/@]\s*[\w(]|[\w)\]]\s+-\s+[\w(]")
_MATH = re.compile(r"\$[^$]*\$")
_DEBUG = re.compile(
    r"^\W*(?:then\s+|and\s+|first\s+)?(?:print|compare|check|try|plot|write out|work out|"
    r"write down|(?:decode|count|normalise)\b.*\bby hand|set \w+ to each)\b",
    re.I,
)
_OPERATORS = {
    ast.Div: "divide",
    ast.FloorDiv: "divide",
    ast.Mult: "multiply",
    ast.Add: "add",
    ast.Sub: "subtract",
    ast.MatMult: "matmul",
    ast.Pow: "power",
}
_OPERATOR_TEXT = [
    (re.compile(r"(?<=[\w)\]])\s*/\s*(?=[\w(])"), "divide"),
    (re.compile(r"(?<=[\w)\]])\s*\*\s*(?=[\w(])"), "multiply"),
    (re.compile(r"(?<=[\w)\]])\s*\+\s*(?=[\w(])"), "add"),
    (re.compile(r"(?<=[\w)\]])\s+-\s+(?=[\w(])"), "subtract"),
    (re.compile(r"@"), "matmul"),
]
_CODE_NAME = {  # a word (after :func:`_words`) and the concept it names, in prose and code
    **dict.fromkeys(["source"], "src"),
    **dict.fromkeys(["target"], "tgt"),
    **dict.fromkeys(["embedding", "embedded"], "embed"),
    **dict.fromkeys(["previou"], "prev"),
    **dict.fromkeys(["output"], "out"),
    **dict.fromkeys(["variance"], "var"),
    **dict.fromkeys(["root"], "sqrt"),
    **dict.fromkeys(["average", "averaged"], "mean"),
    **dict.fromkeys(
        ["together", "concatenate", "concatenated", "concat", "append", "appended"], "cat"
    ),
    **dict.fromkeys(["highest", "likely"], "argmax"),
    **dict.fromkeys(["probabilitie", "probability", "prob"], "prob"),
    **dict.fromkeys(["gradient"], "grad"),
    **dict.fromkeys(["param"], "parameter"),
    **dict.fromkeys(["triangle", "triangular"], "tril"),
    **dict.fromkeys(["cumulative"], "cumsum"),
    **dict.fromkeys(["infinity", "isinf", "finite"], "inf"),
    **dict.fromkeys(["divided"], "divide"),
    **dict.fromkeys(["time", "multiplied"], "multiply"),
    **dict.fromkeys(["plu", "added"], "add"),
    **dict.fromkeys(["minu", "subtracted"], "subtract"),
    **dict.fromkeys(["project", "projected", "projection", "dot"], "matmul"),
    **dict.fromkeys(["blocked", "masked", "padded", "masking"], "mask"),
    **dict.fromkeys(["squared"], "power"),
    **dict.fromkeys(["largest", "biggest"], "max"),
    **dict.fromkeys(["exponentiate"], "exp"),
    **dict.fromkeys(["scored", "scoring"], "score"),
    **dict.fromkeys(["word"], "token"),
    **dict.fromkeys(["querie"], "query"),
    **dict.fromkeys(["encoder"], "encode"),
    **dict.fromkeys(["stacked"], "stack"),
    **dict.fromkeys(["clipped", "clipping"], "clip"),
    **dict.fromkeys(["sample", "sampled"], "multinomial"),
    **dict.fromkeys(["zero", "0"], "zero"),
    **dict.fromkeys(["dropped"], "drop"),
    **dict.fromkeys(["shifted"], "shift"),
    **dict.fromkeys(["scaled"], "scale"),
    **dict.fromkeys(["cached"], "cache"),
    **dict.fromkeys(["attn"], "attention"),
    **dict.fromkeys(["number"], "item"),  # `.item()` gives the loss as a number
    **dict.fromkeys(["rate"], "lr"),
}
_LETTER = {"q": "query", "k": "key", "v": "value"}
# English words that are also code names (``model.out``, ``torch.ones``, ``t.all()``): in prose
# they are the English word
_ENGLISH = frozenset(
    "out one all new get the a an of to at by it its is are in on with and or per each every no".split()
)
_LONE_ZERO = re.compile(r"(?<![\w.])0(?![\w.])")


def _hint_concepts(text: str) -> set[str]:
    """The concepts a hint's clause names (see the section's comment)."""
    text = _MATH.sub(" ", text)
    words = _words(text) | ({"0"} if _LONE_ZERO.search(text) else set())
    out = {_CODE_NAME.get(w, w) for w in words if w not in _ENGLISH and (len(w) > 1 or w == "0")}
    return out | {name for rx, name in _OPERATOR_TEXT if rx.search(text)}


def _code_concepts(code: str) -> set[str]:
    """The concepts of code's names (``q``/``k``/``v`` read as query/key/value)."""
    words = _words(code)
    return {_LETTER.get(w, _CODE_NAME.get(w, w)) for w in words if len(w) > 1 or w in _LETTER}


def _statement_concepts(stmt: str, free: set[str]) -> tuple[set[str], set[str]]:
    """``(computed, assigned)``: the concepts of what a statement computes (its names, less the
    freely chosen ``free`` ones, and its operators) and of the names it assigns."""
    op = _operation(stmt)
    computed = _code_concepts(op) - free
    try:
        tree = ast.parse(op.strip())
    except SyntaxError:
        computed |= {name for rx, name in _OPERATOR_TEXT if rx.search(op)}
    else:
        computed |= {
            _OPERATORS[type(n.op)]
            for n in ast.walk(tree)
            if isinstance(n, ast.BinOp) and type(n.op) in _OPERATORS
        }
    assigned = _code_concepts(stmt.replace(op, " ", 1)) if op != stmt else set()
    return computed, assigned


def _free_names(statements: list[str]) -> set[str]:
    """Names a solution binds as ``for`` loop variables or as a nested helper's name and
    parameters: the student's choice, which a hint may use without outlining anything."""
    names: set[str] = set()
    for stmt in statements:
        loop = re.match(r"\s*for\s+(.+?)\s+in\b", stmt)
        if loop:
            names |= _code_concepts(loop.group(1))
        helper = re.match(r"\s*def\s+(\w+)\((.*)\)", stmt)
        if helper:
            names |= _code_concepts(helper.group(1)) | _code_concepts(helper.group(2))
    return names


def hint_clauses(hint: str) -> list[tuple[str, bool]]:
    """``(clause, asks)`` for each clause of ``hint``; ``asks`` when its sentence is a question
    or the clause or its sentence sends the student to debug (see the section's comment)."""
    out = []
    for sentence in re.split(r"(?<=[.?!])\s+(?=[-*A-Z(\[`$])|\n", hint):
        asks = "?" in sentence or bool(_DEBUG.match(sentence))
        for clause in re.split(r"[;:?]\s*|[.,]\s+", sentence):
            if _words(clause):
                out.append((clause.strip(), asks or bool(_DEBUG.match(clause))))
    return out


def _clause_maps(
    clause: str, asks: bool, computed: set[str], assigned: set[str], given: set[str]
) -> bool:
    text = _TRY_VALUE.sub(" ", clause)
    have = _hint_concepts(text)
    beyond = computed - given
    hits = (computed | assigned) & have
    if not beyond & have or len(hits) < max(2, 0.5 * len(beyond)):
        return False
    return bool(_CODE_CLAUSE.search(_MATH.sub(" ", text))) or not asks


def _matching(edges: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[int, int]]:
    """A maximum matching of statements to clause slots (``edges``: the slots each statement
    may take), by augmenting paths."""
    owner: dict[tuple[int, int], str] = {}

    def take(stmt: str, seen: set) -> bool:
        for slot in edges[stmt]:
            if slot not in seen:
                seen.add(slot)
                if slot not in owner or take(owner[slot], seen):
                    owner[slot] = stmt
                    return True
        return False

    for stmt in edges:
        take(stmt, set())
    return {stmt: slot for slot, stmt in owner.items()}


def _outline_of(
    clauses: list[tuple[str, bool]], statements: list[str], given: set[str]
) -> list[tuple[str, str]]:
    free = _free_names(statements) - given
    slots = [2 if _CODE_CLAUSE.search(_MATH.sub(" ", c)) else 1 for c, _ in clauses]
    edges, seen = {}, set()
    for stmt in dict.fromkeys(statements):
        if re.match(r"\s*(?:def|for|class)\b", stmt):
            continue
        computed, assigned = _statement_concepts(stmt, free)
        key = (frozenset(computed), frozenset(assigned))
        if len(computed | assigned) < 2 or key in seen:
            continue  # too little to map; or if/else twins the words cannot tell apart
        seen.add(key)
        edges[stmt] = [
            (i, k)
            for i, (c, asks) in enumerate(clauses)
            if _clause_maps(c, asks, computed, assigned, given)
            for k in range(slots[i])
        ]
    n = len(edges)
    found = _matching({s: e for s, e in edges.items() if e})
    if len(found) >= MAX_MAPPED_HINT or (len(found) >= 2 and n >= 3 and 2 * len(found) > n):
        return [(clauses[slot[0]][0], stmt) for stmt, slot in found.items()]
    return []


def hint_outline(
    hint: str, statements: list[str] | list[list[str]], parameters: set[str] = frozenset()
) -> list[tuple[str, str]]:
    """``(hint clause, statement)`` for each statement a clause of ``hint`` maps onto when the
    hint outlines one implementation of the reference (see the comment above), else empty.
    ``statements``: one implementation's statements, or a list of implementations (the solution
    region's and the reference function's, :func:`reference_statement_groups`); ``parameters``:
    the reference's parameter names."""
    groups = [statements] if statements and isinstance(statements[0], str) else statements
    given = _code_concepts(" ".join(parameters))
    clauses = hint_clauses(hint)
    best: list[tuple[str, str]] = []
    for group in groups:
        found = _outline_of(clauses, list(group), given)
        if len(found) > len(best):
            best = found
    return best


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


def logical_statements(lines: list[str]) -> list[str]:
    """Code lines joined into logical statements (a line that leaves a bracket open continues on
    the next), comments and blank lines dropped."""
    out: list[str] = []
    current: list[str] = []
    depth = 0
    for line in lines:
        code = strip_comment(line)
        if not code:
            continue
        current.append(code)
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth <= 0:
            out.append(" ".join(current))
            current, depth = [], 0
    if current:
        out.append(" ".join(current))
    return out


def _written_methods(cells: list[Mapping[str, Any]]) -> set[str]:
    """The methods an exercise's solution regions write: the ``def`` each region sits in, and the
    ``def``s inside it."""
    names: set[str] = set()
    for cell in cells:
        lines = cell_source(cell).split("\n")
        for r in find_regions(cell_source(cell))[0]:
            before = re.findall(r"def (\w+)\(", "\n".join(lines[: r.begin]))
            names.update(before[-1:])
            names.update(re.findall(r"def (\w+)\(", "\n".join(lines[r.begin : r.end])))
    return names


def reference_statement_groups(
    exercise: Any, nb: Mapping[str, Any]
) -> tuple[list[list[str]], set[str]]:
    """``(implementations, parameters)`` of an exercise's reference, for :func:`hint_outline`:
    its solution region's logical statements in ``nb`` (the solution notebook), and the
    statements of its reference function's source (for a class, of the methods the solution
    region writes, else ``__init__`` and ``forward``: the class's other methods are the course's
    own); the parameter names of that source."""
    import inspect
    import textwrap

    cells = [
        c
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code" and exercise_id(c) == exercise.id
    ]
    groups = [logical_statements([ln for c in cells for ln in _solution_lines(c)[0]])]
    reference = exercise.reference
    try:
        if isinstance(reference, type):
            wanted = [m for m in _written_methods(cells) if m in vars(reference)]
            wanted = wanted or [m for m in ("__init__", "forward") if m in vars(reference)]
            sources = [textwrap.dedent(inspect.getsource(vars(reference)[m])) for m in wanted]
            source = "\n".join(sources) or inspect.getsource(reference)
        else:
            source = inspect.getsource(reference)
    except (OSError, TypeError):
        return [g for g in groups if g], set()
    groups.append(source_statements(source))
    return [g for g in groups if g], parameter_names(source)
