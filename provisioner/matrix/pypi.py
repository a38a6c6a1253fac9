"""Read a Python package index the way pip does, with the standard library only.

Owns: the user's pip settings (index URL, CA bundle, client certificate,
proxy, trusted hosts, time-out: read through ``pip config list`` and the
``PIP_*`` variables, with pip's precedence), the project pages of the simple
API (PEP 691 JSON, or PEP 503 HTML from mirrors that serve only that), wheel
file names (PEP 427/425 tags -> Python versions and CPU architectures), and
each wheel's core metadata: the PEP 658 ``.metadata`` file where the index
offers one, else the ``METADATA`` member read out of the wheel with HTTP range
requests (only the zip's central directory and that member travel, not the
wheel). Metadata is cached by the file's sha256, so a wheel is read once.

Nothing here is imported on the CLI's start path; ``--online`` commands and the
snapshot script use it.
"""

from __future__ import annotations

import email.parser
import hashlib
import html.parser
import io
import json
import os
import re
import shlex
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field

from provisioner.arch import ARCHES
from provisioner.errors import ProvisionError
from provisioner.matrix import cache

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = ("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2,"
          " text/html;q=0.01")


class IndexUnavailable(ProvisionError):
    """The index cannot be read (unreachable, refused, or not a simple API)."""


# ------------------------------------------------------------------ pip settings


@dataclass(frozen=True)
class PipSettings:
    """What pip would use to reach its index, and where each value came from."""

    index_url: str = DEFAULT_INDEX
    cert: str | None = None
    client_cert: str | None = None
    proxy: str | None = None
    trusted_hosts: tuple[str, ...] = ()
    timeout: float = 15.0
    origin: dict = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"index {self.index_url} ({self.origin.get('index-url', 'pip default')})"]
        if self.proxy:
            parts.append(f"proxy {self.proxy} ({self.origin.get('proxy')})")
        elif any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
            parts.append("proxy from the environment")
        if self.cert:
            parts.append(f"CA bundle {self.cert} ({self.origin.get('cert')})")
        return ", ".join(parts)


# pip reads [global], then the command's section, then PIP_* variables; later wins.
_SECTIONS = ("global", "download", "install", ":env:")
_KEYS = {"index-url": "index_url", "i": "index_url", "cert": "cert", "client-cert": "client_cert",
         "proxy": "proxy", "trusted-host": "trusted_hosts", "timeout": "timeout", "default-timeout": "timeout"}


def parse_pip_config(text: str) -> dict[str, tuple[str, str]]:
    """``pip config list`` output -> {key: (value, section)} with pip's precedence."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^([^=.]*|:env:)\.([A-Za-z0-9_-]+)=(.*)$", line.strip())
        if not m:
            continue
        section, key, raw = m.group(1), m.group(2).lower().replace("_", "-"), m.group(3)
        try:
            value = " ".join(shlex.split(raw)) if raw[:1] in "'\"" else raw
        except ValueError:
            value = raw.strip("'\"")
        found.setdefault(key, {})[section] = value
    out = {}
    for key, by_section in found.items():
        for section in _SECTIONS:
            if section in by_section:
                out[key] = (by_section[section], section)
    return out


def pip_settings(python: str | None = None, config_text: str | None = None) -> PipSettings:
    """The index settings pip would use here (runs ``python -m pip config list``)."""
    if config_text is None:
        try:
            proc = subprocess.run([python or sys.executable, "-m", "pip", "config", "list"],
                                  capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise IndexUnavailable(f"cannot read pip's configuration: {exc}") from None
        if proc.returncode != 0:
            raise IndexUnavailable(f"pip config list failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        config_text = proc.stdout
    values = parse_pip_config(config_text)
    kwargs: dict = {}
    origin: dict = {}
    for key, (value, section) in values.items():
        name = _KEYS.get(key)
        if name is None or not value:
            continue
        origin[key if key != "i" else "index-url"] = "environment" if section == ":env:" else f"pip config [{section}]"
        if name == "trusted_hosts":
            kwargs[name] = tuple(value.split())
        elif name == "timeout":
            try:
                kwargs[name] = float(value)
            except ValueError:
                raise IndexUnavailable(f"pip's timeout setting {value!r} is not a number") from None
        elif name == "index_url":
            kwargs[name] = value.rstrip("/")
        else:
            kwargs[name] = value
    return PipSettings(origin=origin, **kwargs)


# --------------------------------------------------------------------- transport


class Transport:
    """urllib with pip's CA bundle, client certificate, proxy and trusted hosts."""

    def __init__(self, settings: PipSettings):
        self.settings = settings
        ctx = ssl.create_default_context(cafile=settings.cert) if settings.cert else ssl.create_default_context()
        if settings.client_cert:
            ctx.load_cert_chain(settings.client_cert)
        self._ctx = ctx
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        self._insecure = insecure
        proxies = {"http": settings.proxy, "https": settings.proxy} if settings.proxy else None
        self._proxy = urllib.request.ProxyHandler(proxies)  # None: the environment's proxies

    def _opener(self, url: str):
        host = urllib.parse.urlsplit(url).hostname or ""
        ctx = self._insecure if host in self.settings.trusted_hosts else self._ctx
        return urllib.request.build_opener(self._proxy, urllib.request.HTTPSHandler(context=ctx))

    def get(self, url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
        req = urllib.request.Request(url, headers={"User-Agent": "provision-matrix-verify", **(headers or {})})
        try:
            with self._opener(url).open(req, timeout=self.settings.timeout) as resp:
                return resp.status if hasattr(resp, "status") else 200, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers.items()) if exc.headers else {}, b""
        except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", exc)
            raise IndexUnavailable(f"cannot reach {url}: {reason}") from None


# ----------------------------------------------------------------- project pages


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None = None
    requires_python: str | None = None
    yanked: bool = False
    metadata_file: bool = False  # PEP 658/714: url + ".metadata" exists
    metadata_sha256: str | None = None
    upload_time: str | None = None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs))


def parse_project_page(body: bytes, content_type: str, base_url: str) -> list[IndexFile]:
    """The files of one project page, JSON (PEP 691) or HTML (PEP 503/658)."""
    out = []
    if "json" in content_type:
        data = json.loads(body)
        for f in data.get("files", []):
            meta = f.get("core-metadata", f.get("dist-info-metadata"))
            out.append(IndexFile(
                filename=f["filename"], url=urllib.parse.urljoin(base_url, f["url"]),
                sha256=(f.get("hashes") or {}).get("sha256"), requires_python=f.get("requires-python"),
                yanked=bool(f.get("yanked")), metadata_file=bool(meta),
                metadata_sha256=meta.get("sha256") if isinstance(meta, dict) else None,
                upload_time=f.get("upload-time")))
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for a in parser.links:
        href = a.get("href")
        if not href:
            continue
        url, _, frag = urllib.parse.urljoin(base_url, href).partition("#")
        sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
        meta = a.get("data-core-metadata", a.get("data-dist-info-metadata"))
        meta_sha = meta.split("=", 1)[1] if meta and meta.startswith("sha256=") else None
        out.append(IndexFile(
            filename=urllib.parse.unquote(url.rsplit("/", 1)[-1]), url=url, sha256=sha,
            requires_python=a.get("data-requires-python"), yanked="data-yanked" in a,
            metadata_file=meta is not None and meta != "false", metadata_sha256=meta_sha))
    return out


# ------------------------------------------------------------------ wheel names


@dataclass(frozen=True)
class WheelTags:
    name: str
    version: str
    pythons: tuple[str, ...]  # "3.10"; "3" for py3 / abi3-style tags
    abi: str
    platform: str
    arch: str | None  # x86_64 / aarch64 on Linux, "any" for a platform-independent wheel, else None

    @property
    def tag(self) -> str:
        return f"{'.'.join('cp' + p.replace('.', '') for p in self.pythons)}-{self.abi}-{self.platform}"


def wheel_tags(filename: str) -> WheelTags | None:
    """PEP 427 wheel file name -> tags; None for sdists and unparsable names."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    name, version, py, abi, plat = parts[0], parts[1], parts[-3], parts[-2], parts[-1]
    pythons = []
    for tag in py.split("."):
        m = re.fullmatch(r"(?:cp|py|pp)(\d)(\d*)", tag)
        if m:
            pythons.append(f"{m.group(1)}.{m.group(2)}" if m.group(2) else m.group(1))
    arch = None
    plats = plat.split(".")
    if plat == "any":
        arch = "any"
    elif any(p.startswith(("manylinux", "linux", "musllinux")) for p in plats):
        for a in ARCHES:
            if any(p.endswith("_" + a) for p in plats):
                arch = a
    return WheelTags(name, version, tuple(pythons), abi, plat, arch)


# ---------------------------------------------------------------- core metadata


def parse_metadata(text: str) -> dict:
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return {
        "name": msg.get("Name"),
        "version": msg.get("Version"),
        "requires_python": msg.get("Requires-Python"),
        "requires_dist": [str(r) for r in msg.get_all("Requires-Dist") or []],
    }


class _RangeFile(io.RawIOBase):
    """A remote file as a seekable stream: each read is an HTTP range request.

    Reads are rounded up to ``block`` bytes and kept, so zipfile's many small
    reads cost a few requests: the tail (end of central directory), the central
    directory, and one member."""

    def __init__(self, transport: Transport, url: str, size: int, first: tuple[int, bytes], block: int = 65536):
        super().__init__()
        self._t, self._url, self._size, self._block = transport, url, size, block
        self._pos = 0
        self._chunks: list[tuple[int, bytes]] = [first]

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=0):
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _have(self, start: int, end: int) -> bytes | None:
        for off, data in self._chunks:
            if off <= start and end <= off + len(data):
                return data[start - off:end - off]
        return None

    def read(self, n=-1):
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._have(self._pos, end)
        if data is None:
            lo, hi = self._pos, min(self._size, max(end, self._pos + self._block))
            status, _, body = self._t.get(self._url, {"Range": f"bytes={lo}-{hi - 1}"})
            if status != 206 or len(body) != hi - lo:
                raise IndexUnavailable(f"{self._url}: range request answered {status}")
            self._chunks.append((lo, body))
            data = body[: end - lo]
        self._pos += len(data)
        return data

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def _metadata_member(zf: zipfile.ZipFile, filename: str) -> str:
    tags = wheel_tags(filename)
    names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
    if tags:
        want = [n for n in names if normalize(n.split("-")[0]) == normalize(tags.name)]
        names = want or names
    if not names:
        raise IndexUnavailable(f"{filename}: no .dist-info/METADATA in the wheel")
    return zf.read(names[0]).decode("utf-8", "replace")


class Index:
    """One simple-API index, read through a Transport; metadata cached by sha256."""

    def __init__(self, settings: PipSettings, use_cache: bool = True):
        self.settings = settings
        self.url = settings.index_url.rstrip("/")
        self.transport = Transport(settings)
        self.use_cache = use_cache
        self.fetched = {"pages": 0, "metadata_files": 0, "wheel_ranges": 0, "cached": 0}

    def files(self, project: str) -> list[IndexFile]:
        url = f"{self.url}/{normalize(project)}/"
        if url.startswith("file:"):
            return self._local_files(project, url)
        status, headers, body = self.transport.get(url, {"Accept": ACCEPT})
        self.fetched["pages"] += 1
        if status == 404:
            return []
        if status != 200:
            raise IndexUnavailable(f"{url}: the index answered HTTP {status}")
        ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), "text/html")
        try:
            return parse_project_page(body, ctype, url)
        except (ValueError, KeyError) as exc:
            raise IndexUnavailable(f"{url}: not a simple-API page ({exc})") from None

    def _local_files(self, project: str, url: str) -> list[IndexFile]:
        path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
        page = os.path.join(path, "index.html")
        if os.path.isfile(page):
            with open(page, "rb") as fh:
                return parse_project_page(fh.read(), "text/html", urllib.parse.urljoin(url, "index.html"))
        if not os.path.isdir(path):
            return []
        return [IndexFile(n, urllib.parse.urljoin(url, urllib.parse.quote(n))) for n in sorted(os.listdir(path))
                if n.endswith(".whl")]

    def metadata(self, f: IndexFile) -> dict:
        """Core metadata of one wheel: Requires-Dist, Requires-Python."""
        key = f"pypi-meta-{f.sha256}.json" if f.sha256 else None
        if key and self.use_cache:
            hit = cache.read(key)
            if isinstance(hit, dict):
                self.fetched["cached"] += 1
                return hit
        text = self._metadata_text(f)
        meta = parse_metadata(text)
        if key and self.use_cache:
            cache.write(key, meta)
        return meta

    def _metadata_text(self, f: IndexFile) -> str:
        if f.url.startswith("file:"):
            with zipfile.ZipFile(urllib.request.url2pathname(urllib.parse.urlsplit(f.url).path)) as zf:
                return _metadata_member(zf, f.filename)
        if f.metadata_file:
            status, _, body = self.transport.get(f.url + ".metadata")
            self.fetched["metadata_files"] += 1
            if status == 200 and (f.metadata_sha256 is None
                                  or hashlib.sha256(body).hexdigest() == f.metadata_sha256):
                return body.decode("utf-8", "replace")
        status, headers, body = self.transport.get(f.url, {"Range": "bytes=-65536"})
        self.fetched["wheel_ranges"] += 1
        if status == 200:  # the server ignores ranges: the whole wheel came
            data = body
            if f.sha256 and hashlib.sha256(data).hexdigest() != f.sha256:
                raise IndexUnavailable(f"{f.filename}: sha256 does not match the index")
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                return _metadata_member(zf, f.filename)
        if status != 206:
            raise IndexUnavailable(f"{f.url}: the index answered HTTP {status}")
        crange = next((v for k, v in headers.items() if k.lower() == "content-range"), "")
        m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", crange.strip())
        if not m:
            raise IndexUnavailable(f"{f.url}: a range answer without Content-Range")
        size = int(m.group(3))
        raw = _RangeFile(self.transport, f.url, size, (int(m.group(1)), body))
        try:
            with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=65536)) as zf:
                return _metadata_member(zf, f.filename)
        except zipfile.BadZipFile as exc:
            raise IndexUnavailable(f"{f.filename}: not a readable wheel ({exc})") from None
