"""What every grading process imports, imported once in the batch's fork server.

``course grade -j N`` grades each submission in its own process, forked from a fork server
(:func:`course_utils.grading.cli._grade_isolated`). Whatever that server has imported, each
worker has for free (copy-on-write); whatever it has not, each worker imports again: about
900 modules and 1.7 s of the grader's own CPU per submission (nbformat and its JSON schema
validator, jupyter_client and zmq, IPython's input transformers, the course's registry of
exercises and questions, the lessons, sympy through torch), measured on nb03. On a 2-core
machine that was one submission in six.

Nothing here runs student code or starts a thread or a socket: importing is all it does, in
the trusted process, before any submission is read. ``warm()`` also builds the course's
exercise and question tables once, so the lessons' modules are imported too.
"""

from __future__ import annotations

import importlib

#: modules a grading process imports after ``course_utils.grading.grader`` (measured)
MODULES = (
    "nbformat",
    "nbformat.validator",
    "nbformat.v4",
    "jsonschema",
    "fastjsonschema",
    "zmq",
    "jupyter_client",
    "jupyter_client.manager",
    "jupyter_client.blocking.client",
    "jupyter_client.provisioning.local_provisioner",
    "IPython.core.inputtransformer2",
    "tqdm",
    "sympy",
    "torch.fx.experimental.symbolic_shapes",
    "ipykernel.kernelspec",
    "ctypes.util",
    "resource",
    "course_utils.checks",
    "course_utils.grading.questions",
    "course_utils.grading.similarity",
)


def warm() -> None:
    """Import :data:`MODULES` (a missing optional one is skipped) and build the course's
    exercise and question tables."""
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module; the worker imports what it needs
            pass
    from course_utils.grading.plan import exercise_table, question_table

    exercise_table()
    question_table()


warm()
