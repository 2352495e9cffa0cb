"""A real S3-compatible server for the trace tests: moto's server mode, its own process, on loopback."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from pyarrow import fs

from spark_analysis.read.storage import Storage

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "nsq-trace-test", "AWS_SECRET_ACCESS_KEY": "nsq-trace-test",
               "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str  # http://127.0.0.1:<port>

    @property
    def environment(self) -> dict[str, str]:
        """What a process needs to reach the store by the standard variables alone."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    @property
    def storage(self) -> Storage:
        """Options carried to the tasks: the endpoint and the credentials (a test's Spark started before the store)."""
        return Storage.from_environment([f"access_key={CREDENTIALS['AWS_ACCESS_KEY_ID']}",
                                         f"secret_key={CREDENTIALS['AWS_SECRET_ACCESS_KEY']}", "region=us-east-1",
                                         "allow_bucket_creation=true"],
                                        {"AWS_ENDPOINT_URL": self.endpoint})

    def bucket(self, name: str) -> None:
        filesystem, _ = self.storage.locate(f"s3://{name}")
        filesystem.create_dir(name)

    def upload(self, local_path, url: str) -> None:
        filesystem, path = self.storage.locate(url)
        self.bucket(path.split("/")[0])
        with open(local_path, "rb") as source, filesystem.open_output_stream(path) as target:
            shutil.copyfileobj(source, target, 8 << 20)

    def listing(self, url: str) -> list[str]:
        filesystem, path = self.storage.locate(url)
        return sorted(info.path for info in filesystem.get_file_info(fs.FileSelector(path, recursive=True))
                      if info.type == fs.FileType.File)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def moto_server() -> Iterator[ObjectStore]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on {endpoint}") from None
                time.sleep(0.2)
        yield ObjectStore(endpoint)
    finally:
        process.terminate()
        process.wait(timeout=10)
