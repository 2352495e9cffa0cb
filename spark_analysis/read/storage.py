"""Where captures and outputs live: local paths and URLs (``s3://``, ``gs://``, ``hdfs://``, ``file://``) through one
filesystem layer, ``pyarrow.fs``.

Why pyarrow.fs rather than fsspec: pyarrow is already what every task reads and writes Parquet with, and its C++
clients for S3, GCS and HDFS come in the same wheel, so executors need nothing more installed; a file is a
``RandomAccessFile`` whose ``read_at`` is one ranged GET (a byte range of a capture is read without the rest of the
file); ``ParquetWriter`` and datasets take the filesystem directly; and a ``Storage`` is a few strings, pickled into
the tasks, that rebuild the same filesystem on any executor. fsspec would add s3fs/gcsfs and their async stacks to
every executor for the same operations.

S3-compatible endpoints: the standard ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` of the driver becomes the
``endpoint_override`` (and ``scheme``) of ``pyarrow.fs.S3FileSystem``, and travels to the executors with the other
options (``nsq-trace --storage-option key=value``: any keyword of ``S3FileSystem`` or ``GcsFileSystem``, e.g.
``region=eu-west-1``, ``anonymous=true``). Credentials are not shipped: executors find their own (environment,
instance role), as the driver does.

The Spark JVM reads local tables itself (``read_parquet``); object storage would need Hadoop's S3A jars on every
JVM, so there the tables are read through ``read/parquet_source.py``, in Python, with this same layer.
"""

from __future__ import annotations

import fnmatch
import glob
import io
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pyarrow import fs

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")
_BOOLEANS = {"true": True, "false": False}
_LOCAL_SCHEMES = ("", "file")
_filesystems: dict[tuple, fs.FileSystem] = {}  # per process: a client and its connections are reused


class StorageError(ValueError):
    """A URL or storage option that names no usable filesystem."""


def endpoint_options(environ: Mapping[str, str]) -> dict[str, str]:
    """The S3 endpoint named by the standard environment variables, as ``S3FileSystem`` options."""
    url = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if not url:
        return {}
    parts = urlsplit(url if "://" in url else f"https://{url}")
    return {"endpoint_override": parts.netloc, "scheme": parts.scheme}


@dataclass(frozen=True)
class Storage:
    """The options of every non-local filesystem: plain strings, so that tasks carry them to any executor."""

    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, pairs: list[str] = (), environ: Mapping[str, str] = os.environ) -> Storage:
        """``pairs``: ``key=value`` strings (``--storage-option``), over the endpoint of the environment."""
        options = endpoint_options(environ)
        for pair in pairs:
            key, equals, value = pair.partition("=")
            if not equals or not key:
                raise StorageError(f"storage option {pair!r} is not key=value")
            options[key.strip()] = value.strip()
        return cls(options)

    def locate(self, url: str) -> tuple[fs.FileSystem, str]:
        """The filesystem of ``url`` and the path within it."""
        scheme = urlsplit(url).scheme.lower()
        if is_local(url):
            return fs.LocalFileSystem(), os.path.abspath(local_path(url))
        key = (scheme, urlsplit(url).netloc if scheme == "hdfs" else "", tuple(sorted(self.options.items())))
        if key not in _filesystems:
            _filesystems[key] = self._filesystem(scheme, url)
        parts = urlsplit(url)
        path = parts.path if scheme == "hdfs" else f"{parts.netloc}{parts.path}"
        return _filesystems[key], path.rstrip("/") or "/"

    def _filesystem(self, scheme: str, url: str) -> fs.FileSystem:
        options = {key: _BOOLEANS.get(value.lower(), value) for key, value in self.options.items()}
        try:
            if scheme in ("s3", "s3a"):
                return fs.S3FileSystem(**options)
            if scheme in ("gs", "gcs"):
                return fs.GcsFileSystem(**options)
            return fs.FileSystem.from_uri(url)[0]
        except (TypeError, ValueError, OSError) as exc:
            raise StorageError(f"{url}: {exc}") from None

    def info(self, url: str) -> fs.FileInfo:
        filesystem, path = self.locate(url)
        return filesystem.get_file_info(path)

    def is_file(self, url: str) -> bool:
        return self.info(url).type == fs.FileType.File

    def is_directory(self, url: str) -> bool:
        return self.info(url).type == fs.FileType.Directory

    def size(self, url: str) -> int:
        return self.info(url).size

    def expand(self, patterns: list[str]) -> list[str]:
        """Files named directly, by glob (``*``, ``?``, ``[...]`` in any component), or inside directories (their
        ``*.pcap``, ``*.pcapng``, ``*.cap``), as URLs of the same kind as given."""
        found = []
        for pattern in patterns:
            if is_local(pattern):
                found += _expand_local(local_path(pattern))
            elif glob.has_magic(pattern):
                found += self._glob(pattern)
            elif self.info(pattern).type == fs.FileType.Directory:
                found += [url for url in self.files(pattern) if url.endswith(CAPTURE_SUFFIXES)]
            else:
                found.append(pattern)
        return found

    def _glob(self, pattern: str) -> list[str]:
        prefix, _, _ = pattern.partition("://")
        filesystem, path = self.locate(pattern)
        components = path.split("/")
        fixed = next(i for i, part in enumerate(components) if glob.has_magic(part))
        base = "/".join(components[:fixed])
        listing = filesystem.get_file_info(fs.FileSelector(base, recursive=len(components) - fixed > 1,
                                                           allow_not_found=True))
        matched = [info.path for info in listing if info.type == fs.FileType.File
                   and info.path.count("/") == path.count("/") and fnmatch.fnmatchcase(info.path, path)]
        return sorted(f"{prefix}://{match}" for match in matched)

    def files(self, directory: str, suffix: str = "") -> list[str]:
        """The files directly inside ``directory`` whose names end with ``suffix``, sorted."""
        filesystem, path = self.locate(directory)
        listing = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
        names = sorted(posixpath.basename(info.path) for info in listing
                       if info.type == fs.FileType.File and info.path.endswith(suffix))
        return [join(directory, name) for name in names]

    def directories(self, directory: str) -> list[str]:
        """The directories directly inside ``directory``, sorted."""
        filesystem, path = self.locate(directory)
        listing = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
        names = sorted(posixpath.basename(info.path) for info in listing if info.type == fs.FileType.Directory)
        return [join(directory, name) for name in names]

    def reset_directory(self, url: str) -> None:
        """An empty directory at ``url`` (what was there is deleted)."""
        filesystem, path = self.locate(url)
        if filesystem.get_file_info(path).type != fs.FileType.NotFound:
            filesystem.delete_dir(path)
        filesystem.create_dir(path)

    def delete_directory(self, url: str) -> None:
        filesystem, path = self.locate(url)
        if filesystem.get_file_info(path).type != fs.FileType.NotFound:
            filesystem.delete_dir(path)

    def make_directory(self, url: str) -> None:
        filesystem, path = self.locate(url)
        filesystem.create_dir(path)

    def open_input(self, url: str):
        """A random-access file: ``read_at(length, offset)`` is one ranged read."""
        filesystem, path = self.locate(url)
        return filesystem.open_input_file(path)

    def open_output(self, url: str):
        """A new file's stream (``write``, ``tell``), replacing any file there."""
        filesystem, path = self.locate(url)
        return filesystem.open_output_stream(path)

    def write_text(self, url: str, text: str) -> None:
        with self.open_output(url) as stream:
            stream.write(text.encode())

    def replace_text(self, url: str, text: str) -> None:
        """``write_text`` whose readers see the old text or the new one, never a part (a rename, where the
        filesystem has one)."""
        self.write_text(f"{url}.part", text)
        filesystem, path = self.locate(url)
        filesystem.move(f"{path}.part", path)

    def delete_file(self, url: str) -> None:
        filesystem, path = self.locate(url)
        filesystem.delete_file(path)

    def read_text(self, url: str) -> str:
        filesystem, path = self.locate(url)
        with filesystem.open_input_stream(path) as stream:
            return io.TextIOWrapper(stream, encoding="utf-8").read()


LOCAL = Storage()


def is_local(url: str) -> bool:
    """A plain path or a ``file://`` URL (a one-letter "scheme" is a Windows drive)."""
    scheme = urlsplit(url).scheme
    return scheme in _LOCAL_SCHEMES or len(scheme) == 1


def local_path(url: str) -> str:
    return urlsplit(url).path if url.startswith("file://") else url


def join(url: str, *names: str) -> str:
    return os.path.join(url, *names) if is_local(url) and not url.startswith("file://") else "/".join(
        [url.rstrip("/"), *names])


def _expand_local(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(p for p in glob.glob(os.path.join(path, "*")) if p.endswith(CAPTURE_SUFFIXES))
    if glob.has_magic(path):
        return sorted(glob.glob(path))
    return [path]
