"""The official grader: ``course grade`` (see :mod:`course_utils.grading.cli` for the CLI).

How a submission is graded
--------------------------
1. **Read** the notebook (:mod:`~course_utils.grading.plan`). A file that is missing, not
   JSON, or not a notebook is reported as bad input with zero points.
2. **Match the reference**: ``--assignment``, else the file name, else the exercise ids in the
   cell metadata, else the exercise functions it defines. A notebook of another assignment gets
   a clear message and zero. Points, titles and function names come from the registry
   (``course_utils.checks``), never from the submission.
3. **Plan**: the submission's own cells in its own order, every check cell dropped, and one
   check position per exercise, after the student's exercise cell and the cells the student
   added below it (details in :mod:`~course_utils.grading.plan`). Edited, moved or deleted
   check cells change nothing.
4. **Execute** in a fresh kernel (:mod:`~course_utils.grading.kernel`) inside the
   submission's own sandbox (:mod:`~course_utils.grading.sandbox`: bubblewrap by default on
   Linux, docker/podman, or none), started by the trusted launcher
   (:mod:`~course_utils.grading.launch`): a copy of the submission's folder as working
   directory, an allow-listed environment
   (``COURSE_PROFILE`` from the grader's, default ``ci``; no GPU unless ``--gpu``),
   ``RLIMIT_AS = --memory-mb`` (default 6144 MiB) per process and the same limit on all its
   processes together, a per-cell limit (interrupt, then kill),
   a total limit, output kept up to ``--max-output-kb``. A cell's failure is read from the
   ``execute_reply`` status. Errors in ordinary cells do not stop the run (an unsolved
   exercise must cost only its own points); a dead or hung kernel costs only the exercises
   not graded yet, reported as such.
5. **Harvest and judge** (:mod:`~course_utils.grading.harvest`): at a check position the
   kernel runs the candidate on cases drawn from a seed chosen at grade time and writes plain
   data (``.npz`` + JSON, no pickle; the code is :mod:`~course_utils.grading.inkernel`, sent
   as text); the grading process reads them with caps and without following links, checks
   the archive and every array header before inflating anything, regenerates the cases and
   calls :func:`course_utils.checks.core.judge`.
   Monkeypatching ``course_utils.checks``, ``torch.allclose`` or IPython's ``showtraceback``
   in the kernel gains nothing; replacing the harvest's own functions (or shadowing
   ``course_utils``/``torch``/``numpy`` with files next to the notebook) is detected by
   fingerprints and makes the exercise an ``error`` flagged ``tampered``.

Re-export policy
----------------
An answer that *is* the course's reference implementation (``from course_utils.modeling.attention
import softmax``), wraps or subclasses it, lives in its module, or whose code calls it, is
**flagged**: the status and points stay as computed (the answer is, after all, correct), the
message says so, and the exercise and the report carry a ``flags`` list for the instructor to
review. ``--zero-flagged`` turns such passes into failures with zero points instead. Using
*other* course blocks (for example what ``fallback`` returns for an earlier exercise) is not
flagged.

The trusted side also reviews the source before anything runs (:mod:`~course_utils.grading.policy`):
IPython hooks, tracers, threads, code rewriting, torch's private dispatch, fx/jit, local modules,
numpy round trips and computed lookups are flagged ``policy: <kind>`` (per exercise, or on
every exercise when they change the kernel for everything) and zeroed by ``--zero-flagged``;
a helper shaped like the solution is flagged ``review: solution_shape`` and never zeroed.
The modules: :mod:`~.grader` (entry point), :mod:`~.intake` (admit, read, copy),
:mod:`~.runner` (kernel, cells, limits, teardown), :mod:`~.judge` (harvest, verdict, flags,
entry), :mod:`~.measure` (11.1's memory from the sandbox's cgroup). The README's "Threat
model" section says what is guaranteed and what is best effort.

Threat model, honestly: the sandbox keeps a submission away from the grading machine, the
other submissions and the reports (see :mod:`~course_utils.grading.sandbox`); inside its own
kernel, code runs with the student's privileges, so
a submission written specifically against this grader (one that, say, walks the interpreter
stack to find the cases and calls the reference) could still produce correct outputs without
solving the exercise; the fingerprints, the module checks and the flags make every known
form of that visible. What cannot happen: a verdict, a point count or an error display
decided inside the kernel.

Report (JSON, one object per submission)
----------------------------------------
``{"notebook", "student", "assignment", "total", "max", "percent", "exercises": [{"id",
"title", "points", "max_points", "status", "message", "flags", "runtime_s"}], "flags",
"notes", "error", "error_kind", "kernel", "cells", "output", "seed", "runtime_s"}`` with
``status`` in ``passed / failed / not_attempted / error / timeout`` and ``error_kind`` in
``null / bad_input / usage / grader / busy`` (busy: the kernel did not start in time on a
busy machine; regrade). ``cells.errors[].cell`` is the 0-based index into the
notebook's cells; messages meant for people count cells from 1.

Memory limit default
--------------------
``RLIMIT_AS`` bounds *virtual* memory. Measured on the course's CPU stack: a bare kernel maps
about 70 MB, ``import torch`` about 650 MB, with matplotlib and scikit-learn about 1 GB, and
every extra BLAS thread reserves a 64 MB malloc arena (32 threads: +1.3 GB). The grader
therefore limits BLAS/OpenMP threads (``cpu_count // jobs``, at most 4) and defaults to
6144 MiB, which leaves about 5 GB for a notebook's real data while a memory bomb fails fast
with ``MemoryError``. CUDA reserves tens of GB of address space, so ``--gpu`` lifts the limit.
"""

from __future__ import annotations

from course_utils.grading.grader import GradeOptions, grade_submission

__all__ = ["GradeOptions", "grade_submission"]
