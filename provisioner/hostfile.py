"""The one bounded reader for files that come from a host or a user: version.info, hccn.conf, saved npu-smi
output, --trusted-ca, a --stack file, a trainer config.

Regular files only: a FIFO, a socket, a device (``/dev/zero`` behind a link) or a directory is refused
without blocking (the open is non-blocking and the type is checked on the open descriptor, so a file
swapped after the check is still caught). At most `limit` bytes are read; a larger file is refused, not
truncated, and a read that does not finish within `timeout` seconds (a stuck network mount) is given up.
Base level: imports only errors.
"""

from __future__ import annotations

import os
import stat

from provisioner.errors import ProvisionError

DEFAULT_LIMIT = 4 << 20  # 4 MiB: far above any real version.info, npu-smi output, CA bundle or config
DEFAULT_TIMEOUT = 10.0


class HostFileError(ProvisionError):
    """A file that is not a readable, regular, small enough file (one line, exit 2)."""


def _read(path: str, what: str, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise HostFileError(f"{what}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise HostFileError(f"{what}: {kind}, not a regular file")
        if st.st_size > limit:
            raise HostFileError(f"{what}: larger than {limit} bytes")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise HostFileError(f"{what}: larger than {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise HostFileError(f"{what}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_bytes(path: str | os.PathLike, what: str | None = None, limit: int = DEFAULT_LIMIT,
               timeout: float | None = DEFAULT_TIMEOUT) -> bytes:
    """The bytes of regular file `path` (at most `limit`); HostFileError (one line) for anything else."""
    path = os.fspath(path)
    what = what or str(path)
    if timeout is None:
        return _read(path, what, limit)
    import threading

    box: dict = {}

    def work() -> None:
        try:
            box["data"] = _read(path, what, limit)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="provision-read", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise HostFileError(f"{what}: no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["data"]


def read_text(path: str | os.PathLike, what: str | None = None, limit: int = DEFAULT_LIMIT,
              timeout: float | None = DEFAULT_TIMEOUT, errors: str = "strict") -> str:
    """`read_bytes` decoded as UTF-8: not UTF-8 is one line (errors="strict") or replaced ("replace")."""
    data = read_bytes(path, what, limit, timeout)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError:
        raise HostFileError(f"{what or path}: not UTF-8 text") from None


def try_read_text(path: str | os.PathLike, limit: int = DEFAULT_LIMIT, timeout: float | None = DEFAULT_TIMEOUT) -> str | None:
    """Like read_text (undecodable bytes replaced), but None for a missing, odd or unreadable file (probes)."""
    try:
        return read_text(path, limit=limit, timeout=timeout, errors="replace")
    except HostFileError:
        return None
