"""The content-addressed blob store that holds the prior contents of checkpointed files.

Owns the files under `<state dir>/checkpoints/`: `blobs/<2 hex>/<62 hex>` (one per distinct
content, named by the SHA-256 of the raw bytes) and `tmp/` (blobs being written). A blob file
is a 13-byte header — `DFB1`, a codec byte (`z` zstd, `r` raw), the raw length (8 bytes, big
endian) — then the payload. zstd (level 3) compresses source text several times over,
faster than zlib (scripts/bench_checkpoints.py measures it); a payload that would not shrink
is kept raw.

Invariants:
- A blob is visible under its name only whole: it is written under `tmp/`, then renamed into
  place (same file system), so a kill -9 mid-write leaves at most a stray temporary (swept
  later), never a half blob under a real name.
- `get` returns bytes whose SHA-256 is the name, or raises `BlobMissing` / `BlobCorrupt`:
  a damaged blob is never handed to a restore.
- Equal contents are stored once (`put` of a present, well-formed blob writes nothing).
- The store never touches the user's repository: it lives in defect's state directory.

Durability: a kill -9 cannot lose what the kernel already holds, so the rename is enough for
it. Against a power cut, `put(durable=True)` fsyncs a blob before renaming it (the checkpointer
does so on its worker thread, overlapping the tool's own writes), and `sync_dirs` makes the
renames durable before the checkpoint's metadata is committed, so metadata never points at
lost blobs. Whatever happens, `get` checks the hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import time
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"DFB1"
HEADER_BYTES = len(MAGIC) + 1 + 8
ZSTD_LEVEL = 3
CHECKPOINTS_DIR = "checkpoints"


class BlobError(Exception):
    """A blob cannot be read back."""


class BlobMissing(BlobError):
    """No blob under that name (pruned, or never written)."""


class BlobCorrupt(BlobError):
    """A blob whose bytes do not hash to its name (disk damage, a power cut)."""


def digest_of(data: bytes) -> str:
    """The name content is stored under: SHA-256, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def _encode(data: bytes) -> bytes:
    import zstandard  # lazily: not on the initialize / session/new path

    packed = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    codec, payload = (b"z", packed) if len(packed) < len(data) else (b"r", data)
    return MAGIC + codec + len(data).to_bytes(8, "big") + payload


def _decode(raw: bytes, name: str) -> bytes:
    if len(raw) < HEADER_BYTES or raw[:4] != MAGIC:
        raise BlobCorrupt(f"blob {name} has no valid header")
    codec, length = raw[4:5], int.from_bytes(raw[5:HEADER_BYTES], "big")
    payload = raw[HEADER_BYTES:]
    if codec == b"r":
        data = payload
    elif codec == b"z":
        import zstandard

        try:
            data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=length)
        except zstandard.ZstdError as exc:
            raise BlobCorrupt(f"blob {name} does not decompress: {exc}") from None
    else:
        raise BlobCorrupt(f"blob {name} has an unknown codec {codec!r}")
    if len(data) != length or digest_of(data) != name:
        raise BlobCorrupt(f"blob {name} does not match its hash")
    return data


@dataclass(frozen=True, slots=True)
class SweepReport:
    removed: int
    freed_bytes: int


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BlobStore:
    """Blobs under `root` (normally `<state dir>/checkpoints`); safe to share between
    processes: every write is a rename of a private temporary onto a name fixed by content."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._blobs = root / "blobs"
        self._tmp = root / "tmp"

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> BlobStore:
        return cls(state_dir / CHECKPOINTS_DIR)

    def path_of(self, digest: str) -> Path:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a blob name: {digest!r}")
        return self._blobs / digest[:2] / digest[2:]

    def _well_formed(self, path: Path, length: int) -> bool:
        """A present blob whose header announces `length` bytes (cheap: 13 bytes read).
        A blob a power cut left empty or headless is rewritten by the next `put`."""
        try:
            with open(path, "rb") as f:
                head = f.read(HEADER_BYTES)
        except FileNotFoundError:
            return False
        return (
            len(head) == HEADER_BYTES
            and head[:4] == MAGIC
            and int.from_bytes(head[5:], "big") == length
        )

    def put(self, data: bytes, digest: str | None = None, *, durable: bool = False) -> str:
        """Store `data` (once) and return its name. `digest` saves hashing again when the
        caller already has it. `durable`: fsync the blob before it is renamed into place (a
        power cut then leaves it whole or absent); `sync_dirs` makes the rename durable."""
        name = digest or digest_of(data)
        path = self.path_of(name)
        if self._well_formed(path, len(data)):
            # Fresh again: a sweep spares young blobs, and this one is about to be referenced.
            with contextlib.suppress(OSError):
                os.utime(path)
            return name
        encoded = _encode(data)
        self._tmp.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp / f"{name[:16]}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(encoded)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return name

    def get(self, digest: str) -> bytes:
        try:
            raw = self.path_of(digest).read_bytes()
        except FileNotFoundError:
            raise BlobMissing(f"blob {digest} is missing (pruned?)") from None
        return _decode(raw, digest)

    def has(self, digest: str) -> bool:
        return self.path_of(digest).is_file()

    def stored_size(self, digest: str) -> int:
        """Bytes the blob takes on disk (0 when absent)."""
        try:
            return self.path_of(digest).stat().st_size
        except FileNotFoundError:
            return 0

    def sync(self, digests: Collection[str]) -> None:
        """Make these blobs durable (for blobs `put` without `durable`): fsync each, then
        their directories (in parallel, so the file system can group the journal commits)."""
        paths = [self.path_of(d) for d in set(digests)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(_fsync, paths))
        self.sync_dirs(digests)

    def sync_dirs(self, digests: Collection[str]) -> None:
        """Make the renames of these (already fsynced) blobs durable: fsync their
        directories."""
        dirs = {self.path_of(d).parent for d in set(digests)}
        if not dirs:
            return
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(_fsync, [*dirs, self._blobs]))

    def names(self) -> Iterator[str]:
        """Every blob name present (for sweeping and tests)."""
        if not self._blobs.is_dir():
            return
        for fan in sorted(self._blobs.iterdir()):
            if len(fan.name) == 2 and fan.is_dir():
                for blob in sorted(fan.iterdir()):
                    yield fan.name + blob.name

    def total_bytes(self) -> int:
        return sum(self.stored_size(d) for d in self.names())

    def discard(self, digests: Collection[str], *, grace_seconds: float = 5.0) -> SweepReport:
        """Remove these blobs (a deleted session's, that nothing else references), unless
        one was written or re-`put` in the last `grace_seconds` (someone else may have just
        captured the same content for a checkpoint not committed yet)."""
        return _remove_older(
            [self.path_of(digest) for digest in set(digests)], time.time() - grace_seconds
        )

    def sweep(self, live: Collection[str], *, grace_seconds: float = 3600.0) -> SweepReport:
        """Remove blobs no checkpoint references, and stray temporaries.

        Anything younger than `grace_seconds` is kept: another defect process may have
        just written a blob for a checkpoint it has not committed yet."""
        keep = set(live)
        candidates = [self.path_of(d) for d in self.names() if d not in keep]
        if self._tmp.is_dir():
            candidates.extend(self._tmp.iterdir())
        return _remove_older(candidates, time.time() - grace_seconds)


def _remove_older(paths: Iterable[Path], cutoff: float) -> SweepReport:
    """Unlink each of `paths` last written before `cutoff` (epoch seconds); what went."""
    removed = freed = 0
    for path in paths:
        try:
            st = path.stat()
            if st.st_mtime > cutoff:
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
        freed += st.st_size
    return SweepReport(removed, freed)
