"""``ServingCertificate``: the router's HTTPS certificate (``--ssl-certfile`` /
``--ssl-keyfile``), kept current with its files.

It owns the ``ssl.SSLContext`` the listening sockets serve with, made once at start, and
loads a renewed pair into that same context (``load_cert_chain``): new handshakes present
the new certificate, connections already open keep theirs, and nothing is done per request.
A Kubernetes Secret renewed by cert-manager is seen as it is made: its files are symlinks
into a ``..data`` folder swapped in one rename (the old folder removed), and the files'
stamps, taken through the symlinks, change with it.

The files are polled every ``interval_s`` (the routing file's ``reload_interval_s``), as the
routing and tenant keys files are (``workers.file_watch``): new content is taken once it
reads the same at two polls running, so a pair written in place one file after the other,
or in several steps, is not taken half-written. A pair that cannot be used (a missing or
unreadable file, not PEM, a key that does not belong to the certificate, a key under a
passphrase) is refused and logged once per change of the files; the certificate in force
keeps serving, and the next good pair is taken. Each reload's outcome goes to ``on_result``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from aiohttp import web

from workers.file_watch import FileStamp, PeriodicCheck, SettledContent, file_stamp
from workers.tls import TlsFilesError, load_server_pair

log = logging.getLogger(__name__)

# the certificate file's and the key file's bytes (None: the key is in the certificate file)
Pair = tuple[bytes, bytes | None]


class ServingCertificate:
    """The serving context (``context``) and the watch of the files its pair came from."""

    def __init__(self, certfile: Path, keyfile: Path | None, interval_s: float = 1.0,
                 on_result: Callable[[bool], None] | None = None) -> None:
        """Loads the pair; ``TlsFilesError`` naming the file when it cannot be used."""
        self.certfile = certfile
        self.keyfile = keyfile
        self._on_result = on_result
        self._stamp = self._stamps()
        pair = self._read()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._load(self.context, pair)
        self._in_force = pair
        self._content = SettledContent(_digest(pair))
        self._periodic = PeriodicCheck(self._check, interval_s,
                                       f"serving-certificate:{certfile}",
                                       "serving certificate reload")

    def check(self) -> bool:
        """Read the files again if either changed; whether a new pair took over."""
        stamp = self._stamps()
        if stamp == self._stamp and not self._content.waiting:
            return False
        self._stamp = stamp
        pair: Pair | TlsFilesError
        try:
            pair = self._read()
        except TlsFilesError as exc:            # a missing file is content too: it settles
            pair = exc
        digest = (hashlib.sha256(str(pair).encode()).digest()
                  if isinstance(pair, TlsFilesError) else _digest(pair))
        if not self._content.offer(digest):    # unchanged, or not settled yet
            return False
        if isinstance(pair, TlsFilesError):     # (refused or taken: reported once)
            return self._refuse(pair)
        try:
            # tried on a context of its own first: a pair that fails half-way through
            # load_cert_chain leaves the context it was loaded into with the new certificate
            # and no key, and every handshake after refused
            self._load(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), pair)
            self._take(pair)
        except TlsFilesError as exc:
            return self._refuse(exc)
        log.info("serving certificate reloaded from %s (SHA-256 fingerprint %s): new "
                 "connections get it", self._files(), _fingerprint(pair[0]))
        self._report(True)
        return True

    def _refuse(self, exc: TlsFilesError) -> bool:
        log.error("serving certificate refused, the one in force keeps serving: %s", exc)
        self._report(False)
        return False

    def _take(self, pair: Pair) -> None:
        try:
            self._load(self.context, pair)
        except TlsFilesError:
            # the same bytes loaded on a context of their own a moment ago; should they fail
            # all the same, the pair in force is put back before any handshake (this runs on
            # the loop that serves them); it is held here, its files may be gone from the disk
            self._load(self.context, self._in_force)
            raise
        self._in_force = pair

    def _stamps(self) -> tuple[FileStamp | None, FileStamp | None]:
        return (file_stamp(self.certfile),
                file_stamp(self.keyfile) if self.keyfile is not None else None)

    def _files(self) -> str:
        return str(self.certfile) if self.keyfile is None else (
            f"{self.certfile} and {self.keyfile}")

    def _read(self) -> Pair:
        """Each file read once: what is checked, loaded and compared at the next poll is one
        and the same content (the files may change between two reads)."""
        read: list[bytes] = []
        for path in (self.certfile, self.keyfile):
            if path is None:
                continue
            try:
                read.append(path.read_bytes())
            except OSError as exc:
                why = "no such file" if isinstance(exc, FileNotFoundError) else (
                    exc.strerror or str(exc))
                raise TlsFilesError(f"cannot serve TLS with {self._files()}: {path}: "
                                    f"{why}") from exc
        return read[0], read[1] if len(read) > 1 else None

    def _load(self, context: ssl.SSLContext, pair: Pair) -> None:
        try:
            with _private_copies(pair) as (certfile, keyfile):
                load_server_pair(context, certfile, keyfile,
                                 shown=(self.certfile, self.keyfile))
        except OSError as exc:          # no copy made (out of descriptors or memory)
            raise TlsFilesError(f"cannot serve TLS with {self._files()}: {exc}") from exc

    def _report(self, succeeded: bool) -> None:
        if self._on_result is not None:
            self._on_result(succeeded)

    async def _check(self) -> bool:
        return self.check()

    def start(self) -> None:
        """Watch the files until ``stop()``."""
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def while_serving(self, _app: web.Application) -> AsyncIterator[None]:
        """A ``cleanup_ctx`` entry: the files watched while the application runs."""
        self.start()
        yield
        await self.stop()


@contextlib.contextmanager
def _private_copies(pair: Pair) -> Iterator[tuple[str, str | None]]:
    """The pair as files for ``load_cert_chain``, which reads paths only: in memory
    (``memfd``) where the system has it, so that the key is never written to a disk and a
    read-only root filesystem is no obstacle; else in a temporary folder only this user
    can read. Both are gone on leaving."""
    with contextlib.ExitStack() as stack:
        folder: list[Path] = []

        def copy(name: str, data: bytes) -> str:
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create(f"kvroute-{name}", os.MFD_CLOEXEC)
                stack.callback(os.close, fd)
                with open(fd, "wb", closefd=False) as file:
                    file.write(data)
                return f"/proc/self/fd/{fd}"
            if not folder:
                folder.append(Path(stack.enter_context(tempfile.TemporaryDirectory())))
            (folder[0] / name).write_bytes(data)
            return str(folder[0] / name)

        certificate, key = pair
        yield copy("cert.pem", certificate), copy("key.pem", key) if key is not None else None


def _digest(pair: Pair) -> bytes:
    certificate, key = pair
    return hashlib.sha256(b"%d:%b%b" % (len(certificate), certificate, key or b"")).digest()


def _fingerprint(pem: bytes) -> str:
    """SHA-256 of the first certificate in ``pem``, as ``openssl x509 -fingerprint -sha256``
    prints it (the way to tell which certificate a client was given)."""
    begin, end = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"
    start = pem.find(begin)
    stop = pem.find(end, start)
    try:
        der = ssl.PEM_cert_to_DER_cert(pem[start:stop + len(end)].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return "unknown"
    return ":".join(f"{byte:02X}" for byte in hashlib.sha256(der).digest())
