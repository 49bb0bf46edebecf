"""course_utils: the helper package of *Attention & Transformers, hands-on*.

Verified building blocks (``attention``, ``positional``, ``layers``, ``models``), data
(``data``), the training loop (``training``), run profiles (``profiles``), exercise checks
(``checks``) and the grader (``grading``). Every notebook imports from here.
"""

__version__ = "0.1.0"
