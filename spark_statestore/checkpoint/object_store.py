"""How this library reaches an S3 checkpoint location, from the settings Spark's own S3A
filesystem uses.

Spark writes its offsets and commits to an `s3a://` location through Hadoop's S3A, set up
with `spark.hadoop.fs.s3a.*` keys (endpoint, path-style access, TLS, credentials, retries);
this library reaches the same location through pyarrow's S3 filesystem. `S3Settings.from_conf`
reads those keys on the driver; the settings travel to the tasks with the processor, and
`use` makes them the ones every `s3://`/`s3a://` location of this process is opened with
(a location with a query, such as `?endpoint_override=...`, keeps its own). As in S3A, a
per-bucket key `fs.s3a.bucket.<bucket>.<key>` wins over `fs.s3a.<key>` for that bucket's
locations. Keys not set leave pyarrow's defaults: the AWS environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
...), `~/.aws`, instance credentials.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from urllib.parse import urlparse

import pyarrow.fs as pafs

HADOOP = "spark.hadoop.fs.s3a."
RUNTIME = "fs.s3a."  # as set on a running session (spark.conf.set), which Spark hands to Hadoop as is
S3_SCHEMES = ("s3", "s3a", "s3n")
# S3A's default attempts for a request (fs.s3a.attempts.maximum), used when it is not set
DEFAULT_ATTEMPTS = 5
BUCKET = "bucket."  # fs.s3a.bucket.<bucket>.<key>: S3A's per-bucket override of fs.s3a.<key>
# the keys read, longest first (a per-bucket key's bucket is what comes before one of them)
KEYS = ("connection.ssl.enabled", "attempts.maximum", "endpoint.region", "session.token", "access.key",
        "secret.key", "endpoint")


@dataclass(frozen=True)
class S3Settings:
    """The S3 endpoint, credentials and retry bound of a session (None: pyarrow's default)."""

    endpoint: str | None = None  # host[:port]
    scheme: str | None = None  # "http" or "https"
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    attempts: int = DEFAULT_ATTEMPTS
    # (bucket, its settings) for each bucket with `fs.s3a.bucket.<bucket>.*` keys
    buckets: tuple[tuple[str, S3Settings], ...] = ()

    def __repr__(self) -> str:  # never the secret
        buckets = "".join(f", bucket {name!r}: {settings!r}" for name, settings in self.buckets)
        return (f"S3Settings(endpoint={self.endpoint!r}, scheme={self.scheme!r}, region={self.region!r}, "
                f"attempts={self.attempts}{buckets})")

    def for_bucket(self, bucket: str | None) -> S3Settings:
        """The settings a location in `bucket` is reached with (its per-bucket keys' or these)."""
        return next((settings for name, settings in self.buckets if name == bucket), self)

    @classmethod
    def from_conf(cls, get: Callable[[str], str | None], keys: Iterable[str] = ()) -> S3Settings:
        """The `spark.hadoop.fs.s3a.*` keys of a Spark configuration lookup (None: unset),
        or the `fs.s3a.*` keys of a running session (they win, as in Spark); `keys`: the
        configuration's key names, where per-bucket keys (`fs.s3a.bucket.<bucket>.<key>`,
        winning over `fs.s3a.<key>` for the bucket) are found. A bad value raises
        `ValueError` naming the key and the value."""
        conf = get

        def generic(name: str) -> str | None:
            found = conf(RUNTIME + name)
            return conf(HADOOP + name) if found is None else found

        base = cls._from_lookup(lambda key: generic(key.removeprefix(HADOOP)), RUNTIME)
        buckets = []
        for bucket in _buckets(keys):

            def get(key: str, bucket: str = bucket) -> str | None:
                name = key.removeprefix(HADOOP)
                found = generic(f"{BUCKET}{bucket}.{name}")
                return generic(name) if found is None else found

            settings = cls._from_lookup(get, f"{RUNTIME}{BUCKET}{bucket}.")
            buckets.append((bucket, settings))
        return replace(base, buckets=tuple(buckets))

    @classmethod
    def _from_lookup(cls, get: Callable[[str], str | None], named: str) -> S3Settings:
        """Settings from `get(spark.hadoop.fs.s3a.<key>)`; errors name the key as `named<key>`."""
        endpoint = get(HADOOP + "endpoint") or None
        scheme = None
        ssl = get(HADOOP + "connection.ssl.enabled")
        if ssl is not None:
            if ssl.strip().lower() not in ("true", "false"):
                raise ValueError(f"{named}connection.ssl.enabled must be true or false, got {ssl!r}")
            scheme = "https" if ssl.strip().lower() == "true" else "http"
        if endpoint is not None and "://" in endpoint:
            parsed = urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError(f"{named}endpoint must be host[:port] or an http(s) URL, got {endpoint!r}")
            scheme, endpoint = parsed.scheme, parsed.netloc
        attempts_text = get(HADOOP + "attempts.maximum")
        attempts = DEFAULT_ATTEMPTS
        if attempts_text is not None:
            text = attempts_text.strip()  # ASCII digits only (int() takes other scripts' too)
            attempts = int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else 0
            if attempts < 1:
                raise ValueError(f"{named}attempts.maximum must be a whole number of at least 1, got {attempts_text!r}")
        return cls(
            endpoint=endpoint,
            scheme=scheme,
            access_key=get(HADOOP + "access.key") or None,
            secret_key=get(HADOOP + "secret.key") or None,
            session_token=get(HADOOP + "session.token") or None,
            region=get(HADOOP + "endpoint.region") or None,
            attempts=attempts,
        )

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 filesystem with these settings. It tries each request once: the
        durable layer (`DurableDir`) tries again, `attempts` times in all, and logs each
        retry. Small objects go in one PUT (`allow_delayed_open`: the multipart upload
        pyarrow would start for every file costs two more requests)."""
        options: dict = {"retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1), "allow_delayed_open": True}
        for name in ("endpoint", "scheme", "access_key", "secret_key", "session_token", "region"):
            value = getattr(self, name)
            if value is not None:
                options["endpoint_override" if name == "endpoint" else name] = value
        environment = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if self.endpoint is None and environment:  # as pyarrow's `from_uri` takes it
            parsed = urlparse(environment if "://" in environment else f"https://{environment}")
            options["endpoint_override"] = parsed.netloc
            options.setdefault("scheme", parsed.scheme)
        return pafs.S3FileSystem(**options)


def _buckets(keys: Iterable[str]) -> list[str]:
    """The buckets that per-bucket keys among `keys` name, in order."""
    found: dict[str, None] = {}
    for key in keys:
        rest = key.removeprefix("spark.hadoop.").removeprefix(RUNTIME)
        if key.startswith((HADOOP + BUCKET, RUNTIME + BUCKET)) and rest.startswith(BUCKET):
            rest = rest.removeprefix(BUCKET)
            name = next((k for k in KEYS if rest.endswith("." + k)), None)
            if name is not None and len(rest) > len(name) + 1:
                found.setdefault(rest[: -len(name) - 1], None)
    return list(found)


_lock = threading.Lock()
_current: S3Settings | None = None
_filesystems: dict[tuple, pafs.S3FileSystem] = {}


def use(settings: S3Settings | None) -> None:
    """Open this process's `s3://`/`s3a://` locations with `settings` from now on (None:
    pyarrow's defaults, from the AWS environment)."""
    global _current
    with _lock:
        _current = settings


def attempts(bucket: str | None = None) -> int:
    """How many times a request to the object store (in `bucket`) is tried (the settings in use)."""
    with _lock:
        return (_current or S3Settings()).for_bucket(bucket).attempts


def filesystem(bucket: str | None = None) -> pafs.S3FileSystem:
    """The S3 filesystem of the settings in use (for `bucket`), one per process and
    settings: its connections are kept for the next request (a filesystem per open would
    connect anew for each, a TCP and, on AWS, a TLS handshake per file)."""
    with _lock:
        settings = (_current or S3Settings()).for_bucket(bucket)
        # what pyarrow takes from the environment is part of the key: a change is seen
        key = (settings, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
        fs = _filesystems.get(key)
        if fs is None:
            fs = _filesystems[key] = settings.filesystem()
        return fs
