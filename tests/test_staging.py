"""`bench dataset stage` copies regular files and directories only, never through a link,
never widening a mode; anything else in the source is refused, each entry named on one line,
before anything is copied or replaced in the export."""
from __future__ import annotations

import contextlib
import io
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from bench import manifest
from bench.host.dataset import main

REPO = Path(__file__).resolve().parent.parent
IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
       "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _can_make_devices() -> bool:
    probe = Path(tempfile.mkdtemp()) / "null"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    except PermissionError:
        return False
    finally:
        probe.unlink(missing_ok=True)
        probe.parent.rmdir()
    return True


CAN_MAKE_DEVICES = _can_make_devices()


def snapshot(root: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry under ``root`` (links not followed): its mode and content or target."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            content = (path.read_bytes() if stat.S_ISREG(mode)
                       else os.readlink(path) if stat.S_ISLNK(mode) else None)
            entries[str(path.relative_to(root))] = (mode, content)
    return entries


def make_export(root: Path) -> Path:
    """An export that already holds an earlier stage, which a refused stage must keep."""
    export = root / "export"
    (export / "imagefolder").mkdir(parents=True)
    (export / "imagefolder" / "old.bin").write_bytes(b"earlier stage")
    (export / "fashion-mnist").mkdir()
    (export / "fashion-mnist" / "old.bin").write_bytes(b"earlier stage")
    return export


def private_key(root: Path) -> Path:
    key = root / "outside" / "id_ed25519"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    return key


def fashion_source(root: Path) -> Path:
    src = root / "fmnist"
    src.mkdir()
    for name in IDX:
        (src / name).write_bytes(name.encode())
    return src


def stage(capsys, *argv: str) -> tuple[int, str]:
    code = main(["stage", *argv])
    return code, capsys.readouterr().err


def test_a_file_link_to_a_private_key_is_refused_and_never_lands_in_the_export(tmp_path,
                                                                               capsys):
    src = fashion_source(tmp_path)
    (src / IDX[1]).unlink()
    (src / IDX[1]).symlink_to(private_key(tmp_path))
    export = make_export(tmp_path)
    before = snapshot(export)
    code, err = stage(capsys, "fashion-mnist", "--src", str(src), "--export", str(export))
    assert code == 2
    assert f"{IDX[1]} is a symbolic link" in err and "nothing was copied" in err
    assert snapshot(export) == before


def test_a_directory_link_is_refused_not_pulled_in(tmp_path, capsys):
    src = tmp_path / "images"
    (src / "train" / "cat").mkdir(parents=True)
    (src / "train" / "cat" / "1.png").write_bytes(b"png")
    private_key(tmp_path)
    (src / "train" / "dog").symlink_to(tmp_path / "outside")
    export = make_export(tmp_path)
    before = snapshot(export)
    code, err = stage(capsys, "imagefolder", "--src", str(src), "--export", str(export))
    assert code == 2 and "train/dog is a symbolic link" in err
    assert snapshot(export) == before


def test_a_split_that_is_a_link_is_refused(tmp_path, capsys):
    real = tmp_path / "real" / "train" / "cat"
    real.mkdir(parents=True)
    (real / "1.png").write_bytes(b"png")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "train").symlink_to(tmp_path / "real" / "train")
    export = make_export(tmp_path)
    code, err = stage(capsys, "imagefolder", "--src", str(tmp_path / "images"),
                      "--export", str(export))
    assert code == 2 and "train is a symbolic link" in err


def test_every_offending_entry_is_named_on_one_line(tmp_path, capsys):
    src = tmp_path / "images"
    train = src / "train" / "cat"
    train.mkdir(parents=True)
    (train / "ok.png").write_bytes(b"png")
    os.mkfifo(train / "pipe")
    os.mknod(train / "sock", stat.S_IFSOCK | 0o644)
    (train / "evil\nname.png").write_bytes(b"png")
    (train / "esc\x1b[2J.png").write_bytes(b"png")
    (train / "inside.png").symlink_to(train / "ok.png")
    (train / "secret.png").write_bytes(b"png")
    (train / "secret.png").chmod(0o600)
    expected = ["train/cat/pipe is a FIFO", "train/cat/sock is a socket",
                f"{ascii('train/cat/evil' + chr(10) + 'name.png')} has a control character",
                f"{ascii('train/cat/esc' + chr(27) + '[2J.png')} has a control character",
                "train/cat/inside.png is a symbolic link",
                "train/cat/secret.png is not readable by others (mode 0600)"]
    if CAN_MAKE_DEVICES:
        os.mknod(train / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.mknod(train / "loop", stat.S_IFBLK | 0o660, os.makedev(7, 0))
        expected += ["train/cat/null is a character device", "train/cat/loop is a block device"]
    export = make_export(tmp_path)
    before = snapshot(export)
    proc = subprocess.run([sys.executable, "-m", "bench", "dataset", "stage", "imagefolder",
                           "--src", str(src), "--export", str(export)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n")
    for line in expected:
        assert line in proc.stderr
    assert f"holds {len(expected)} entries" in proc.stderr
    assert snapshot(export) == before


def test_modes_are_narrowed_never_widened(tmp_path, capsys):
    src = tmp_path / "images"
    train = src / "train" / "cat"
    train.mkdir(parents=True)
    modes = {"a.png": 0o644, "b.png": 0o755, "c.png": 0o604, "d.png": 0o444, "e.png": 0o666}
    for name, mode in modes.items():
        (train / name).write_bytes(name.encode())
        (train / name).chmod(mode)
    (src / "train").chmod(0o705)
    export = make_export(tmp_path)
    code, err = stage(capsys, "imagefolder", "--src", str(src), "--export", str(export))
    assert code == 0, err
    staged = export / "imagefolder" / "train" / "cat"
    for name, mode in modes.items():
        assert stat.S_IMODE((staged / name).stat().st_mode) == mode & 0o644
        assert stat.S_IMODE((staged / name).stat().st_mode) & ~mode == 0
    assert stat.S_IMODE((export / "imagefolder" / "train").stat().st_mode) == 0o705
    assert not (export / "imagefolder" / "old.bin").exists()


def test_fashion_mnist_stages_its_four_files_and_nothing_else(tmp_path, capsys):
    src = fashion_source(tmp_path)
    (src / "notes").symlink_to(private_key(tmp_path))  # not one of the four: not looked at
    export = make_export(tmp_path)
    code, err = stage(capsys, "fashion-mnist", "--src", str(src), "--export", str(export))
    assert code == 0, err
    dest = export / "fashion-mnist"
    assert sorted(p.name for p in dest.iterdir()) == sorted([*IDX, manifest.MANIFEST_NAME])
    assert sorted(manifest.parse(dest / manifest.MANIFEST_NAME)) == sorted(IDX)
    assert manifest.verify(dest, "all", 1)


# --- property: random source trees ---------------------------------------------------------

# Names the stage refuses, spelled out independently of bench.manifest: C0 and C1 control
# characters, DEL, the line and paragraph separators, and bytes that are not UTF-8.
def is_odd(name: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029"
               or 0xD800 <= ord(c) < 0xE000 for c in name)


ODD_NAMES = ["new\nline", "tab\there", "esc\x1b[31m", "del\x7f", "c1\x85", "sep\u2028x",
             "para\u2029", "cr\r", "bad\udcff"]
PLAIN_NAMES = st.text(st.characters(blacklist_characters="/\x00",
                                    blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
                      min_size=1, max_size=10).filter(lambda n: n not in (".", ".."))
ANY_NAMES = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
            min_size=1, max_size=10).filter(lambda n: n not in (".", "..")),
    st.sampled_from(ODD_NAMES))
READABLE_FILE, READABLE_DIR = [0o644, 0o444, 0o755, 0o604, 0o666], [0o755, 0o555, 0o705]
SPECIALS = ["link-inside-file", "link-inside-dir", "link-outside-key", "link-outside-dir",
            "link-dangling", "fifo", "socket"] + (["chardev"] if CAN_MAKE_DEVICES else [])


def trees(names, file_modes, dir_modes, specials):
    """(kind, ...) nodes: ("file", mode, bytes), ("dir", mode, [(name, node)]), (special,)."""
    leaves = st.tuples(st.just("file"), st.sampled_from(file_modes), st.binary(max_size=64))
    if specials:
        leaves = st.one_of(leaves, st.tuples(st.sampled_from(specials)))
    nodes = st.recursive(
        leaves,
        lambda children: st.tuples(st.just("dir"), st.sampled_from(dir_modes),
                                   st.lists(st.tuples(names, children), max_size=4,
                                            unique_by=lambda child: child[0])),
        max_leaves=10)
    return st.tuples(st.sampled_from(dir_modes),
                     st.lists(st.tuples(names, nodes), max_size=5,
                              unique_by=lambda child: child[0]))


# Half the sources could be staged (plain names, readable modes, files and directories),
# half mix in links, FIFOs, sockets, devices, odd names and private modes.
SOURCES = st.one_of(
    trees(PLAIN_NAMES, READABLE_FILE, READABLE_DIR, []),
    trees(ANY_NAMES, [*READABLE_FILE, 0o600, 0o640], [*READABLE_DIR, 0o700, 0o750], SPECIALS))


def build(path: Path, node: tuple, root: Path) -> None:
    kind = node[0]
    if kind == "file":
        path.write_bytes(node[2])
        path.chmod(node[1])
    elif kind == "dir":
        path.mkdir()
        for name, child in node[2]:
            build(path / name, child, root)
        path.chmod(node[1])
    elif kind.startswith("link-"):
        target = {"link-inside-file": root / "src" / "readme.txt",
                  "link-inside-dir": root / "src" / "extra",
                  "link-outside-key": root / "outside" / "id_ed25519",
                  "link-outside-dir": root / "outside",
                  "link-dangling": root / "nowhere"}[kind]
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        os.mknod(path, stat.S_IFSOCK | 0o644)
    else:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def expected(node: tuple, rel: str, files: dict, offending: list) -> None:
    """The oracle: regular files (path -> (mode, bytes)) and offending entries."""
    kind = node[0]
    if kind == "file":
        files[rel] = node[1], node[2]
        if not node[1] & 0o004:
            offending.append(rel)
    elif kind == "dir":
        if node[1] & 0o005 != 0o005:
            offending.append(rel)
        for name, child in node[2]:
            if is_odd(name):
                offending.append(f"{rel}/{name}")
            else:
                expected(child, f"{rel}/{name}", files, offending)
    else:
        offending.append(rel)


def shown(rel: str) -> str:
    return ascii(rel) if is_odd(rel) or not rel.isprintable() else rel


@given(SOURCES)
def test_staging_refuses_untouched_or_copies_exactly_the_regular_files(source):
    capture = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        private_key(root)
        (root / "src" / "extra").mkdir(parents=True)
        (root / "src" / "readme.txt").write_text("inside")
        train = ("dir", source[0], source[1])
        build(root / "src" / "train", train, root)
        export = make_export(root)
        before = snapshot(export)
        files: dict[str, tuple[int, bytes]] = {}
        offending: list[str] = []
        expected(train, "train", files, offending)
        event("refused" if offending else f"staged {min(len(files), 3)}+ files")
        with contextlib.redirect_stderr(capture):
            code = main(["stage", "imagefolder", "--src", str(root / "src"),
                         "--export", str(export)])
        err = capture.getvalue()
        if offending:
            assert code == 2
            assert err.endswith("\n") and err[:-1].isprintable()  # one line
            for rel in offending:
                assert shown(rel) in err
            assert snapshot(export) == before
            return
        assert code == 0, err
        dest = export / "imagefolder"
        after = snapshot(dest)
        staged = {rel: entry for rel, entry in after.items() if stat.S_ISREG(entry[0])}
        assert sorted(staged) == sorted([*files, manifest.MANIFEST_NAME])
        assert not [rel for rel, (mode, _) in after.items()
                    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))]
        for rel, (mode, content) in files.items():
            assert staged[rel][1] == content
            assert stat.S_IMODE(staged[rel][0]) == mode & 0o644   # never wider
        assert sorted(manifest.parse(dest / manifest.MANIFEST_NAME)) == sorted(files)
        assert b"OPENSSH" not in b"".join(c for _, c in staged.values())
