"""Download a public dataset, check every file's SHA-256, and convert it: ``recbole-fbsm download citeulike-t``.

pooch fetches each file into ``OUT/.NAME.download/`` (through a fresh temporary file, renamed once its SHA-256 is
right), so a rerun fetches only the files not yet there; the converter renames the dataset into place only when
complete, so a failure leaves nothing under ``OUT/NAME``.
"""

import os
import re
import shutil
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pooch
import requests
from tqdm import tqdm

from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES
from recbole_fbsm.config.datasets import DATASETS, SOURCES, unknown_download_message
from recbole_fbsm.errors import ColdStartError

from .ctr import convert_ctr
from .text import target_folder

pooch.get_logger().setLevel("WARNING")  # its "Downloading data from URL" lines would show a mirror's password


class DownloadError(ColdStartError):
    """A file that could not be fetched or failed its check; the message names the URL and what to do."""


def download_dataset(name, out="dataset", mirror=None, overwrite=False, timeout=30.0, progress=True):
    """Fetch the files of dataset ``name`` (from ``mirror``, a base URL, when given), check their SHA-256,
    convert them into ``out/name`` and return the ConversionResult; a DownloadError or ConversionError leaves
    nothing under ``out/name``."""
    out = os.path.expanduser(str(out))  # '--out=~/data': no shell expands a ~ after '='
    if name not in DATASETS:
        raise ColdStartError(unknown_download_message(name, out))
    if mirror and not re.match(r"(https?|file)://", mirror, re.I):  # not urlsplit: a broken address is the download's
        raise ColdStartError(
            f"--mirror {redact(mirror)!r}: expected a base URL starting with http://, https:// or file://"
        )
    source = SOURCES[DATASETS[name].source]
    base = mirror.rstrip("/") + "/" if mirror else source["url"]
    target_folder(out, name, overwrite)  # an existing dataset without --overwrite fails before any download
    cache = Path(out) / f".{name}.download"
    if cache.is_symlink():  # a folder this command makes, never one a planted link points to
        cache.unlink()
    wanted = {file: source["files"][file] for file in DATASETS[name].files}
    for file, (size, sha256) in wanted.items():
        fetch_file(base + urllib.parse.quote(file), cache / file, size, sha256, timeout, progress)
    note = "\ndownloaded by recbole-fbsm download (sizes and SHA-256 checked; the download folder named under " + (
        "sources was removed):\n"
        + "".join(
            f"  {redact(base)}{file}  {size:,} bytes  sha256 {sha256}\n" for file, (size, sha256) in wanted.items()
        )
    )
    files = {key: cache / file for key, file in (CTR_FILES | CTR_TAG_FILES).items() if file in wanted}  # keywords
    result = convert_ctr(name=name, out_dir=out, overwrite=overwrite, readme_note=note, **files)
    shutil.rmtree(cache, ignore_errors=True)
    return result


def redact(url):
    """``url`` without the ``user:password@`` of a mirror: messages and README.txt are read by others."""
    return re.sub(r"//[^/@\s]*@", "//***@", url)


def fetch_file(url, dest, size, sha256, timeout, progress=False):
    """Make ``dest`` the file at ``url`` with this ``sha256`` (pooch keeps a checked one, fetches it otherwise);
    every failure is one DownloadError naming the URL, and leaves no part of the file behind."""
    dest, shown = Path(dest), redact(url)
    if dest.is_symlink():  # pooch would read through it, or move the file into the folder it names
        dest.unlink()
    bar = tqdm(  # as RecBole shows progress: on a terminal, and only once the file has taken a few seconds
        total=size,
        desc=f"downloading {dest.name}",
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=2.0,
        leave=False,
        file=sys.stderr,
        disable=None if progress else True,
    )
    downloader = pooch.HTTPDownloader(progressbar=bar, timeout=timeout, headers={"User-Agent": "recbole-fbsm"})
    try:
        pooch.retrieve(
            url,
            f"sha256:{sha256}",
            fname=dest.name,
            path=dest.parent,
            downloader=_copy_local if url.startswith("file:") else downloader,
        )
    except OSError as error:  # requests' errors too: HTTP status, refused, closed mid-file, no data within --timeout
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


def _why(error):
    """What failed, without the pool and retry wording requests and urllib3 wrap it in."""
    if isinstance(error, requests.HTTPError):
        return f"HTTP {error.response.status_code} {error.response.reason}"
    if isinstance(error, requests.Timeout) or "timed out" in str(error):
        return "no data within --timeout"
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return "the connection ended mid-file"
    return str(getattr(error.args[0] if error.args else None, "reason", error)).split("): ", 1)[-1]
