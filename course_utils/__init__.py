"""course_utils: the helper package of *Attention & Transformers, hands-on*.

Three layers, each importing only from the ones above it:

- ``modeling``: the verified building blocks (``attention``, ``positional``, ``layers``) and the
  models built from them (``models``: GPT, ViT, the encoder-decoder Transformer, the RNNs);
- ``runtime``: where and how they run (``profiles``, ``devices``, ``training``,
  ``distributed``);
- ``authoring``: the tools that make and check the notebooks (``release``, ``regions``,
  ``leaks``, ``student_work``, ``claims``, ``execute``, ``nbval_strict``).

Beside them: ``lessons``, one package per notebook (its exercises, graded questions and
experiments, found by ``lessons.discover()``: open that folder for the table of contents), the
shared ``data``, the exercise-check machinery (``checks``), the grader (``grading``), ``plots``,
``widgets`` and the benchmarks (``bench``). Every notebook imports from here.

Importing the package has no side effect on the process (the command line and the test suite
opt into :func:`course_utils.fast_nbformat.skip_iri_parser` themselves).
"""

__version__ = "0.1.0"
