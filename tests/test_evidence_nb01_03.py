"""Review C (turn 4) findings in notebooks 01-03 (issue 34, ``evidence-findings.md``), one test
each, named after its row. Fast: no notebook is executed; the solutions' sources and their stored
``cpu`` outputs are read."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from course_utils.data.tasks import TranslationTask
from course_utils.lessons.nb01_rnn_bottleneck.questions import QUESTIONS as QUESTIONS_01

ROOT = Path(__file__).resolve().parents[1]
NB01 = ROOT / "solutions" / "01_rnn_bottleneck.ipynb"


def cell(path: Path, cell_id: str) -> dict:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = [c for c in cells if c.get("id") == cell_id]
    assert len(found) == 1, f"{path.name}: cell {cell_id!r} not found"
    return found[0]


def flat(text: str | list[str]) -> str:
    return " ".join("".join(text).split())


def outputs(c: dict) -> str:
    """A code cell's stored stream and Markdown outputs, flattened."""
    parts = []
    for out in c.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/markdown", "")))
    return flat(parts)


# ----------------------------------------------------------------------------- 01


def test_01_separates_capacity_in_bits_from_what_a_gru_learns_to_store_C_01b():
    """C-01b: "all of it has to fit into H floating-point numbers ... That is the bottleneck"
    read as a capacity limit. The model section says it is not one in bits, with arithmetic that
    holds for this task, and no 01 misconception names "one number per word" as the error."""
    text = flat(cell(NB01, "model-md")["source"])
    assert "but not one of raw capacity" in text and "*learns* to store" in text, text
    m = re.search(
        r"a (\d+)-word sentence over this (\d+)-word vocabulary is about "
        r"\$\d+ \\log_2 \d+ \\approx (\d+)\$ bits, and even \$H = (\d+)\$ float32 "
        r"numbers hold ([\d,]+) bits",
        text,
    )
    assert m, text
    words, vocab, bits, h, floats_bits = m.groups()
    assert int(vocab) == len(TranslationTask(seed=0).src_vocab)
    assert int(bits) == round(int(words) * math.log2(int(vocab)))
    assert int(floats_bits.replace(",", "")) == 32 * int(h)
    for q in QUESTIONS_01:
        for m in q.misconceptions:
            assert "one number per" not in m.name, (q.id, m.name)


def test_01_look_alikes_sentence_is_scoped_and_rendered_from_the_run_C_01d():
    """C-01d: "a wider c and more steps push it to longer sentences, a shorter path helps some
    middle lengths" was unscoped and false in `ci` (there a wider c gained most on 3-5 words and
    reversing helped no bucket). The sentence is scoped to `cpu`/`gpu` with a claim per
    look-alike, and the run renders where each one helped."""
    text = flat(cell(NB01, "ea60ce76")["source"])
    assert "push it to longer sentences" not in text
    assert "So, in those profiles, the look-alikes" in text
    run = cell(NB01, "5cc74490")
    source = "".join(run["source"])
    for scoped in (
        "more steps help most on a bucket between the shortest and the longest",
        "reversing the source helps most on a bucket between the shortest and the",
    ):
        assert f'claim("In the `cpu` and `gpu` profiles, {scoped}' in source, scoped
    stored = outputs(run)
    assert stored.count("✓ In the `cpu` and `gpu` profiles") == 4, stored
    assert "Where each look-alike helped, in this run:" in stored, stored
