"""Download a public dataset, check every file's SHA-256, and convert it: ``recbole-fbsm download citeulike-t``.

Files arrive as ``FILE.part`` in ``OUT/.NAME.download/``: a part left by a dropped connection is resumed with an
HTTP Range request by the next run, a file of the wrong size or checksum is deleted, and the converter renames
the dataset into place only when complete, so a failure leaves nothing under ``OUT/NAME``.
"""

from __future__ import annotations

import http.client
import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm import tqdm

from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES
from recbole_fbsm.config.datasets import DATASETS, SOURCES, unknown_download_message
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.storage.fingerprint import file_sha256

from .atomic import target_folder
from .ctr import convert_ctr

DEFAULT_TIMEOUT = 30.0  # seconds a connection or a read may wait for the server
CHUNK_BYTES = 1 << 16
PROGRESS_AFTER_S = 2.0  # a progress bar appears only for a download that takes longer than this
# convert_ctr's keyword for each file of the table (users.dat -> users, tag-item.dat -> tag_item, ...)
CONVERT_KEYWORD = {file: key for key, file in (CTR_FILES | CTR_TAG_FILES).items()}


class DownloadError(ColdStartError):
    """A file that could not be fetched or failed its check; the message names the URL and what to do."""


def download_dataset(name, out="dataset", mirror=None, overwrite=False, timeout=DEFAULT_TIMEOUT, progress=True):
    """Fetch the files of dataset ``name`` (from ``mirror``, a base URL, when given), check their sizes and SHA-256,
    convert them into ``out/name`` and return the ConversionResult; a DownloadError or ConversionError leaves
    nothing under ``out/name``."""
    out = os.path.expanduser(str(out))  # '--out=~/data': no shell expands a ~ after '='
    if name not in DATASETS:
        raise ColdStartError(unknown_download_message(name, out))
    dataset = DATASETS[name]
    source = SOURCES[dataset.source]
    base = _base_url(mirror) if mirror else source["url"]
    target_folder(out, name, overwrite)  # an existing dataset without --overwrite fails before any download
    cache = Path(out) / f".{name}.download"
    cache.mkdir(parents=True, exist_ok=True)
    wanted = {file: source["files"][file] for file in dataset.files}
    with _progress_bar(name, sum(size for size, _ in wanted.values()), progress) as bar:
        for file, (size, sha256) in wanted.items():
            fetch_file(base + urllib.parse.quote(file), cache / file, size, sha256, timeout, bar)
    paths = {CONVERT_KEYWORD[file]: cache / file for file in dataset.files}
    result = convert_ctr(name=name, out_dir=out, overwrite=overwrite, **paths)
    _note_download(result.path / "README.txt", base, wanted)
    shutil.rmtree(cache, ignore_errors=True)
    return result


def _note_download(readme, base, files):
    """Add where the files came from to the dataset's README.txt (its 'sources' are the download folder,
    removed once the dataset is written); replaced whole, so a reader never sees half of it."""
    lines = [f"  {base}{file}  {size:,} bytes  sha256 {sha256}" for file, (size, sha256) in files.items()]
    text = (
        readme.read_text(encoding="utf-8") + "\ndownloaded by recbole-fbsm download (sizes and SHA-256 checked; the "
        "download folder named under sources was removed):\n" + "\n".join(lines) + "\n"
    )
    partial = readme.with_name(readme.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, readme)


def _base_url(mirror):
    scheme = urllib.parse.urlsplit(mirror).scheme
    if scheme not in ("http", "https", "file"):
        raise ColdStartError(f"--mirror {mirror!r}: expected a base URL starting with http://, https:// or file://")
    return mirror if mirror.endswith("/") else mirror + "/"


def fetch_file(url, dest, size, sha256, timeout, bar):
    """Make ``dest`` the file at ``url`` with ``size`` bytes and this ``sha256``: resume ``dest.part`` if one is
    there, check size and checksum, then rename. A wrong file is deleted; a partial one is kept for a rerun."""
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    if dest.is_file():  # checked in an earlier run: checked again, it is cheap
        if file_sha256(dest) == sha256:
            bar.update(size)
            return dest
        dest.unlink()
    have = part.stat().st_size if part.is_file() else 0
    if have > size:
        part.unlink()
        have = 0
    bar.update(have)
    if have < size:
        _transfer(url, part, have, size, timeout, bar)
    digest = file_sha256(part)
    if digest != sha256:
        part.unlink()
        raise DownloadError(
            f"{url}: SHA-256 {digest} differs from the expected {sha256} (another version of "
            f"{dest.name}, or a damaged copy); the file was deleted, a rerun fetches it again."
        )
    os.replace(part, dest)
    return dest


def _transfer(url, part, have, size, timeout, bar):
    """Append the bytes of ``url`` after the first ``have`` to ``part`` (a Range request), or write the whole
    file when the server does not resume; a lost connection keeps what arrived, for the next run to resume."""
    response = _open(url, have, size, timeout)
    if response is None:  # HTTP 416: the server has nothing after our bytes, so they are not its file's start
        part.unlink()
        bar.update(-have)
        return _transfer(url, part, 0, size, timeout, bar)
    with response:
        resumed = response.status == 206 and str(response.headers.get("Content-Range", "")).startswith(f"bytes {have}-")
        if have and not resumed:  # not 206 Partial Content from our byte on: the whole file, start over
            bar.update(-have)
            have = 0
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and have + int(length) != size:
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"{url}: the server offers {have + int(length):,} bytes, expected {size:,} "
                f"(a truncated file, or another version of {part.name[:-5]}); nothing kept."
            )
        received = _copy(url, response, part, have, size, bar)
    if received > size:
        part.unlink()
        raise DownloadError(
            f"{url}: the server sent more than the expected {size:,} bytes (another version of "
            f"{part.name[:-5]}); nothing kept."
        )
    if received < size:
        raise DownloadError(
            f"{url}: the connection ended after {received:,} of {size:,} bytes; rerun the same command to resume."
        )


def _open(url, have, size, timeout):
    """The response to a GET of ``url`` (from byte ``have`` on, when there is a part to resume); None when the
    server refuses that range."""
    headers = {"User-Agent": "recbole-fbsm"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 416 and have:
            return None
        raise DownloadError(
            f"{url}: HTTP {error.code} {error.reason}; expected the file {url.rsplit('/', 1)[-1]} "
            f"({size:,} bytes). Check the URL (--mirror serves the same file names)."
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", None) or _why(error)
        raise DownloadError(f"{url}: cannot open it ({reason}); check the network or --mirror, then rerun.") from None


def _copy(url, response, part, have, size, bar):
    """Write the response's body after the ``have`` bytes already in ``part``; return the bytes now there
    (one more chunk than ``size`` at most: a server sending more is refused by the caller)."""
    received = have
    read = getattr(response, "read1", response.read)  # read1: what has arrived, so a stall keeps those bytes
    try:
        with open(part, "ab" if have else "wb") as f:
            while chunk := read(CHUNK_BYTES):
                received += len(chunk)
                if received > size:
                    break
                f.write(chunk)
                bar.update(len(chunk))
    except (OSError, http.client.HTTPException) as error:  # a timeout (TimeoutError) or a reset mid-file
        raise DownloadError(
            f"{url}: the download stopped after {received:,} of {size:,} bytes ({_why(error)}); "
            "rerun the same command to resume."
        ) from None
    return received


def _why(error):
    if isinstance(error, TimeoutError):
        return "no data within the timeout"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _progress_bar(name, total, enabled):
    """tqdm, as RecBole shows progress: on a terminal, and only once the download has taken a few seconds."""
    return tqdm(
        total=total,
        desc=f"downloading {name}",
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=PROGRESS_AFTER_S,
        leave=False,
        file=sys.stderr,
        disable=None if enabled else True,
    )
