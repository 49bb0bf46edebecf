"""The data cache: where downloads go, a checked downloader, and what ``course doctor`` reports.

The cache directory is ``$COURSE_DATA_DIR`` when set, else ``~/.cache/course_utils``.
Nothing here runs at import time; downloads happen only when a loader is asked to
(``download=True``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen  # module attribute, so tests can monkeypatch it

__all__ = [
    "ENV_VAR",
    "ChecksumError",
    "DownloadError",
    "cache_dir",
    "file_hash",
    "download",
]

ENV_VAR = "COURSE_DATA_DIR"
_CHUNK = 1 << 20


class DownloadError(OSError):
    """A download failed (network, HTTP error, disk); the message says how to get the file by hand."""


class ChecksumError(ValueError):
    """A downloaded or cached file does not have the expected checksum."""


def cache_dir(create: bool = False) -> Path:
    """``$COURSE_DATA_DIR`` if set, else ``~/.cache/course_utils`` (created when ``create``)."""
    value = os.environ.get(ENV_VAR, "").strip()
    path = Path(value).expanduser() if value else Path.home() / ".cache" / "course_utils"
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def file_hash(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``algorithm``: any ``hashlib`` name, e.g. ``sha256`` or ``md5``)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _expected(sha256: str | None, md5: str | None) -> list[tuple[str, str]]:
    return [(name, value.lower()) for name, value in (("sha256", sha256), ("md5", md5)) if value]


def _matches(path: Path, checks: list[tuple[str, str]]) -> bool:
    return all(file_hash(path, name) == value for name, value in checks)


def download(
    url: str,
    dest: str | os.PathLike,
    sha256: str | None = None,
    md5: str | None = None,
    *,
    progress: bool = False,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` (atomically) and verify its checksum; returns ``dest``.

    - If ``dest`` already exists and matches the checksum (or no checksum is given), nothing
      is downloaded (cache hit).
    - The file is written to a temporary name beside ``dest`` and renamed only after the
      checksum matched, so a failed or interrupted download never leaves a partial file.
    - Raises :class:`ChecksumError` on a mismatch and :class:`DownloadError` when the
      download itself fails; both messages say where to put the file by hand.
    """
    dest = Path(dest).expanduser()
    checks = _expected(sha256, md5)
    if dest.exists() and _matches(dest, checks):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    by_hand = (
        f"If this machine is offline, download {url} elsewhere and copy it to {dest} "
        f"(or set {ENV_VAR} to a folder that holds it)."
    )
    hashes = {name: hashlib.new(name) for name, _ in checks}
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        try:
            with os.fdopen(fd, "wb") as out, urlopen(url, timeout=timeout) as response:
                total = (
                    response.headers.get("Content-Length") if hasattr(response, "headers") else None
                )
                bar = None
                if progress:
                    from tqdm.auto import tqdm

                    bar = tqdm(
                        total=int(total) if total else None,
                        unit="B",
                        unit_scale=True,
                        desc=f"downloading {dest.name}",
                    )
                for chunk in iter(lambda: response.read(_CHUNK), b""):
                    out.write(chunk)
                    for h in hashes.values():
                        h.update(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
                if bar is not None:
                    bar.close()
        except (URLError, OSError, ValueError) as exc:
            raise DownloadError(f"could not download {url}: {exc}. {by_hand}") from exc
        for name, value in checks:
            got = hashes[name].hexdigest()
            if got != value:
                raise ChecksumError(
                    f"the file downloaded from {url} has {name} {got}, expected {value}; it was "
                    f"not saved. The server may have changed the file or the download was "
                    f"corrupted; try again. {by_hand}"
                )
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest
