"""Download a public dataset, check every file's SHA-256, and convert it: ``recbole-fbsm download citeulike-t``.

pooch fetches each file into ``OUT/.NAME.download/`` (through a fresh temporary file, renamed once its SHA-256 is
right), so a rerun fetches only the files not yet there; the converter renames the dataset into place only when
complete, so a failure leaves nothing under ``OUT/NAME``.
"""

import os
import re
import shutil
import signal
import sys
import threading
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pooch
import requests
from tqdm import tqdm

from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES
from recbole_fbsm.config.datasets import DATASETS, SOURCES, unknown_download_message
from recbole_fbsm.errors import ColdStartError

from .atomic import target_folder
from .ctr import convert_ctr

DEFAULT_TIMEOUT = 30.0  # seconds a connection or a read may wait for the server
MIN_RATE = 10_000  # bytes/s: a file gets 2 x --timeout plus its size at this rate (a trickle would never time out)
PROGRESS_AFTER_S = 2.0  # a progress bar appears only for a download that takes longer than this
# convert_ctr's keyword for each file of the table (users.dat -> users, tag-item.dat -> tag_item, ...)
KEYWORD = {file: key for key, file in (CTR_FILES | CTR_TAG_FILES).items()}
pooch.get_logger().setLevel("WARNING")  # its "Downloading data from URL" lines would show a mirror's password


class DownloadError(ColdStartError):
    """A file that could not be fetched or failed its check; the message names the URL and what to do."""


def download_dataset(name, out="dataset", mirror=None, overwrite=False, timeout=DEFAULT_TIMEOUT, progress=True):
    """Fetch the files of dataset ``name`` (from ``mirror``, a base URL, when given), check their SHA-256,
    convert them into ``out/name`` and return the ConversionResult; a DownloadError or ConversionError leaves
    nothing under ``out/name``."""
    out = os.path.expanduser(str(out))  # '--out=~/data': no shell expands a ~ after '='
    if name not in DATASETS:
        raise ColdStartError(unknown_download_message(name, out))
    dataset, source = DATASETS[name], SOURCES[DATASETS[name].source]
    base = _base_url(mirror) if mirror else source["url"]
    target_folder(out, name, overwrite)  # an existing dataset without --overwrite fails before any download
    cache = Path(out) / f".{name}.download"
    if cache.is_symlink():  # a folder this command makes, never one a planted link points to
        cache.unlink()
    wanted = {file: source["files"][file] for file in dataset.files}
    for file, (size, sha256) in wanted.items():
        fetch_file(base + urllib.parse.quote(file), cache / file, size, sha256, timeout, progress)
    # where the files came from, at the end of README.txt (its 'sources' are the download folder, removed below)
    provenance = (
        "\ndownloaded by recbole-fbsm download (sizes and SHA-256 checked; the download folder named under "
        + (
            "sources was removed):\n"
            + "".join(
                f"  {redact(base)}{file}  {size:,} bytes  sha256 {sha256}\n" for file, (size, sha256) in wanted.items()
            )
        )
    )
    files = {KEYWORD[file]: cache / file for file in wanted}
    result = convert_ctr(name=name, out_dir=out, overwrite=overwrite, readme_note=provenance, **files)
    shutil.rmtree(cache, ignore_errors=True)
    return result


def _base_url(mirror):
    scheme = mirror.partition("://")[0].lower()  # not urlsplit: a broken address is the download's error line
    if scheme not in ("http", "https", "file"):
        raise ColdStartError(
            f"--mirror {redact(mirror)!r}: expected a base URL starting with http://, https:// or file://"
        )
    return mirror if mirror.endswith("/") else mirror + "/"


def redact(url):
    """``url`` without the ``user:password@`` of a mirror: messages and README.txt are read by others."""
    return re.sub(r"//[^/@\s]*@", "//***@", url)


def fetch_file(url, dest, size, sha256, timeout, progress=False):
    """Make ``dest`` the file at ``url`` with this ``sha256`` (pooch keeps a checked one, fetches it otherwise);
    every failure is one DownloadError naming the URL, and leaves no part of the file behind."""
    dest, shown = Path(dest), redact(url)
    if dest.is_symlink():  # pooch would read through it, or move the file into the folder it names
        dest.unlink()
    downloader = (
        _copy_local
        if url.startswith("file:")
        else pooch.HTTPDownloader(
            progressbar=_progress_bar(dest.name, size, progress),
            timeout=timeout,
            headers={"User-Agent": "recbole-fbsm"},
        )
    )
    deadline = 2 * timeout + size / MIN_RATE
    try:
        with _deadline(
            deadline,
            f"{shown}: not complete after {deadline:.1f} s, the deadline of 2 x --timeout plus "
            f"{size:,} bytes at {MIN_RATE:,} bytes/s; check the network or --mirror, then rerun.",
        ):
            pooch.retrieve(url, f"sha256:{sha256}", fname=dest.name, path=dest.parent, downloader=downloader)
    except DownloadError:
        raise
    except requests.HTTPError as error:
        raise DownloadError(
            f"{shown}: HTTP {error.response.status_code} {error.response.reason}; expected the file {dest.name} "
            f"({size:,} bytes). Check the URL (--mirror serves the same file names)."
        ) from None
    except OSError as error:  # requests' errors too: refused, reset, closed mid-file, no data within --timeout
        raise DownloadError(
            f"{shown}: the download failed ({redact(_why(error))}); check the network or --mirror, then rerun."
        ) from None
    except ValueError:  # pooch's checksum error; it deleted the file
        raise DownloadError(
            f"{shown}: SHA-256 differs from the expected {sha256} (another version of {dest.name}, or a damaged "
            "copy); the file was deleted, a rerun fetches it again."
        ) from None


def _copy_local(url, output_file, _pooch):
    """pooch's downloader for a ``file://`` mirror."""
    shutil.copyfile(urllib.request.url2pathname(urllib.parse.urlsplit(url).path), output_file)


@contextmanager
def _deadline(seconds, message):
    """A DownloadError after ``seconds``: SIGALRM interrupts a blocked read (--timeout bounds each read only), where
    signals reach (the main thread of a system with SIGALRM)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise DownloadError(message)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _why(error):
    """What failed, without the pool and retry wording requests and urllib3 wrap it in."""
    if isinstance(error, requests.Timeout) or "timed out" in str(error):
        return "no data within --timeout"
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return "the connection ended mid-file"
    reason = getattr(error.args[0] if error.args else None, "reason", error)
    return str(reason).split("): ", 1)[-1]


def _progress_bar(file, size, enabled):
    """tqdm, as RecBole shows progress: on a terminal, and only once the file has taken a few seconds."""
    return tqdm(
        total=size,
        desc=f"downloading {file}",
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=PROGRESS_AFTER_S,
        leave=False,
        file=sys.stderr,
        disable=None if enabled else True,
    )
