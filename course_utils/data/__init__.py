"""Data for the course: generated tasks, text, images and the download cache.

- :mod:`~course_utils.data.tasks`: the toy translation task (PAD=0, BOS=1, EOS=2), reverse and
  sort tasks, batches and accuracy-by-length metrics (notebooks 01, 02, 10);
- :mod:`~course_utils.data.text`: a character-level corpus (tiny-shakespeare or an offline
  fallback) with nanoGPT-style batches (notebook 08);
- :mod:`~course_utils.data.images`: scikit-learn digits and CIFAR-10 (notebook 09);
- :mod:`~course_utils.data.cache`: the cache folder and a checksum-verified downloader.

Nothing is downloaded at import time or unless a loader is called with ``download=True``.
"""

from course_utils.data import cache, images, tasks, text
from course_utils.data.cache import cache_dir, download
from course_utils.data.images import ImageSplit, load_cifar10, load_digits_split
from course_utils.data.tasks import (
    BOS,
    EOS,
    PAD,
    Example,
    ReverseTask,
    Seq2SeqData,
    SortTask,
    TaskData,
    TranslationTask,
    Vocab,
    accuracy_by_length,
    alignment_matrix,
    alignment_score,
    batches,
    exact_match,
    make_reverse_data,
    make_sort_data,
    make_translation_data,
    token_accuracy,
)
from course_utils.data.text import (
    CharDataset,
    CharTokenizer,
    TextCorpus,
    get_batch,
    load_text_corpus,
    train_val_split,
)

__all__ = [
    "cache",
    "images",
    "tasks",
    "text",
    "cache_dir",
    "download",
    "ImageSplit",
    "load_cifar10",
    "load_digits_split",
    "PAD",
    "BOS",
    "EOS",
    "Example",
    "Vocab",
    "TranslationTask",
    "ReverseTask",
    "SortTask",
    "Seq2SeqData",
    "TaskData",
    "make_translation_data",
    "make_reverse_data",
    "make_sort_data",
    "batches",
    "exact_match",
    "token_accuracy",
    "accuracy_by_length",
    "alignment_matrix",
    "alignment_score",
    "CharDataset",
    "CharTokenizer",
    "TextCorpus",
    "get_batch",
    "load_text_corpus",
    "train_val_split",
]
