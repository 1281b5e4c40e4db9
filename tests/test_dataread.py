"""The data stage's readers (bench.rank.dataread) and the --data-url, --nfs-export settings:
what a listing may hold, which URLs and directories are accepted, and reads that count
every byte they move."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.accept_config import NFS_URL, AcceptConfig, check_nfs_url
from bench.host import lab_nfs, netlab
from bench.host.launchers.netns import NetnsOptions
from bench.options import ConfigError
from bench.rank import dataread

LISTING = """\
drwxr-xr-x  2 65534 65534         4096 fashion-mnist
-rw-r--r--  1 65534 65534          370 fashion-mnist/MANIFEST.sha256
-rw-r--r--  1 65534 65534      4422079 fashion-mnist/t10k-images-idx3-ubyte.gz
lrwxrwxrwx  1 65534 65534           11 fashion-mnist/link
-rw-r--r--  1 65534 65534           10 fashion-mnist/a?b
-rw-r--r--  1 65534 65534           10 fashion-mnist/../escape
-rw-r--r--  1 65534 65534           10 fashion-mnist/two words
"""


def _fake_tools(tmp_path: Path, listing: str, body: bytes = b"x" * 3000) -> dict:
    """nfs-ls printing ``listing``; nfs-cat printing ``body`` and logging its argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "listing").write_text(listing)
    (tmp_path / "body").write_bytes(body)
    for name, script in (("nfs-ls", f'cat "{tmp_path}/listing"\n'),
                         ("nfs-cat", f'printf "%s\\n" "$1" >> "{tmp_path}/cat.log"\n'
                                     f'cat "{tmp_path}/body"\n')):
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{script}")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_the_listing_gives_the_regular_files_with_safe_names(tmp_path, monkeypatch):
    for key, value in _fake_tools(tmp_path, LISTING).items():
        monkeypatch.setenv(key, value)
    files = dataread.nfs_files("nfs://10.0.0.1/datasets?version=4")
    assert files == [
        ("nfs://10.0.0.1/datasets/fashion-mnist/MANIFEST.sha256?version=4", 370),
        ("nfs://10.0.0.1/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz?version=4",
         4422079)]


def test_an_nfs_read_counts_whole_files_until_the_budget(tmp_path, monkeypatch):
    for key, value in _fake_tools(tmp_path, LISTING, b"y" * 3000).items():
        monkeypatch.setenv(key, value)
    files = [(f"nfs://h/d/f{i}", 3000) for i in range(5)]
    seconds, done, begun = dataread.read_nfs(files, 4000)
    # The second file is read whole although the budget ends inside it: what crossed the
    # wire is what is counted.
    assert (done, begun) == (6000, 2) and seconds > 0
    assert (tmp_path / "cat.log").read_text().split() == ["nfs://h/d/f0", "nfs://h/d/f1"]


def test_a_failing_server_is_one_message_naming_the_url(tmp_path, monkeypatch):
    env = _fake_tools(tmp_path, "")
    (Path(env["PATH"].split(":")[0]) / "nfs-ls").write_text(
        "#!/bin/sh\necho 'Failed to mount nfs share : NFS4ERR_NOENT' >&2\nexit 254\n")
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(dataread.ReadError, match=r"nfs-ls nfs://h/x failed \(Failed to mount"):
        dataread.nfs_files("nfs://h/x")


def test_a_local_read_stops_at_the_budget_and_counts_files(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).write_bytes(b"z" * 1000)
    (tmp_path / "l").symlink_to(tmp_path / "a")
    files = dataread.files_under(tmp_path)
    assert [Path(p).name for p, _ in files] == ["a", "b", "c"]
    seconds, done, begun = dataread.read_local(files, 1500)
    assert (done, begun) == (1500, 2)


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
               max_size=400))
def test_any_listing_text_gives_only_plain_names_inside_the_export(text):
    """Whatever nfs-ls prints, a name that reaches nfs-cat is plain, inside the export, and
    its URL keeps the query after the path."""
    names = []
    for line in text.splitlines():
        match = dataread._LISTED.fullmatch(line)
        if match and match["mode"][0] == "-":
            name = match["name"].strip()
            if dataread._SAFE_NAME.fullmatch(name) and ".." not in name.split("/"):
                names.append(name)
    for name in names:
        assert "?" not in name and "#" not in name and ".." not in name.split("/")
        assert all(c.isalnum() or c in "_.+=,@/-" for c in name)


@pytest.mark.parametrize("url", [
    "nfs://-oProxyCommand=x/d", "nfs://h/../etc", "nfs://h/d?version=4&uid=0",
    "nfs://h/d y", "nfs://h/d;reboot", "nfs://h", "http://h/d", "nfs://h/d\n",
    "nfs://h/d?version=5", "nfs://h:99999999/d"])
def test_a_hostile_data_url_is_refused_naming_the_setting(url):
    with pytest.raises(ConfigError, match="--data-url"):
        check_nfs_url(url)


@given(st.text(max_size=80))
def test_every_accepted_data_url_is_plain(text):
    try:
        check_nfs_url(text)
    except ConfigError:
        return
    assert NFS_URL.fullmatch(text) and not text.split("//", 1)[1].startswith("-")
    assert not set(text) & set(" ;&|$`'\"\\\n\t#")


def test_data_dir_and_data_url_are_one_or_the_other(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        AcceptConfig(stages="data", data_dir=tmp_path, data_url="nfs://h/d")
    with pytest.raises(ConfigError, match="--data-dir.*--data-url"):
        AcceptConfig(stages="data")


def test_the_lab_server_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="--nfs-export"):
        lab_nfs.check_export(str(tmp_path / "missing"))
    weird = tmp_path / "a,b"
    weird.mkdir()
    with pytest.raises(ConfigError, match="docker --mount"):
        lab_nfs.check_export(str(weird))
    assert lab_nfs.check_export(str(tmp_path)) == tmp_path.resolve()
    with pytest.raises(ConfigError, match="--nfs-link.*--nfs-export"):
        NetnsOptions(link_bps=10**9, nfs_link_bps=10**6)
    assert lab_nfs.url("shards") == f"nfs://{netlab.SERVER_ADDRESS}/datasets/shards?version=4"


def test_a_hostile_nfs_image_is_refused(monkeypatch):
    monkeypatch.setenv("NFS_IMAGE", "--privileged")
    with pytest.raises(ConfigError, match="NFS_IMAGE"):
        lab_nfs.image()


def test_accept_names_a_bad_data_url_in_one_line_with_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "accept", "--launcher", "netns",
                           "--link", "1gbit", "--out", str(tmp_path / "o"), "--stages",
                           "data", "--", "--data-url", "nfs://h/$(reboot)"],
                          capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--data-url" in proc.stderr
