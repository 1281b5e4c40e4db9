"""Dataset manifests: written at staging, checked before training."""
from __future__ import annotations

import pytest

from bench import manifest


def make_dataset(root):
    (root / "train").mkdir(parents=True)
    (root / "train" / "a.bin").write_bytes(b"alpha")
    (root / "b.bin").write_bytes(b"beta" * 1000)
    return manifest.write(root)


def test_written_manifest_verifies_and_is_sha256sum_format(tmp_path):
    written = make_dataset(tmp_path)
    lines = written.read_text().splitlines()
    assert lines[0].endswith("  b.bin") and lines[1].endswith("  train/a.bin")
    assert manifest.verify(tmp_path, "all", 1) == manifest.sha256_file(written)


def test_tampered_file_is_named(tmp_path):
    make_dataset(tmp_path)
    (tmp_path / "train" / "a.bin").write_bytes(b"alphA")
    with pytest.raises(manifest.ManifestMismatch, match="train/a.bin does not match"):
        manifest.verify(tmp_path, "all", 1)


def test_missing_file_is_named(tmp_path):
    make_dataset(tmp_path)
    (tmp_path / "b.bin").unlink()
    with pytest.raises(manifest.ManifestMismatch, match="b.bin is listed .* but missing"):
        manifest.verify(tmp_path, "all", 1)


def test_sample_checks_only_some_files_and_off_checks_none(tmp_path):
    make_dataset(tmp_path)
    (tmp_path / "b.bin").write_bytes(b"tampered")
    caught = 0
    for seed in range(20):  # one of two files per draw: the tampered one is drawn sometimes
        try:
            manifest.verify(tmp_path, "sample", 1, seed)
        except manifest.ManifestMismatch:
            caught += 1
    assert 0 < caught < 20
    assert manifest.verify(tmp_path, "off", 1) is None


def test_a_missing_manifest_is_refused_unless_checking_is_off(tmp_path):
    with pytest.raises(manifest.ManifestMismatch, match="MANIFEST.sha256 is missing"):
        manifest.verify(tmp_path, "all", 1)
    assert manifest.verify(tmp_path, "off", 1) is None


def test_a_file_the_manifest_does_not_list_fails_the_check(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"listed")
    manifest.write(tmp_path)
    (tmp_path / "planted.bin").write_bytes(b"not listed")
    with pytest.raises(manifest.ManifestMismatch, match="planted.bin is not listed"):
        manifest.verify(tmp_path, "all", 1)


@pytest.mark.parametrize("name", ["../outside.bin", "/etc/hostname", "a/../../b"])
def test_a_manifest_entry_outside_the_dataset_is_refused(tmp_path, name):
    (tmp_path / manifest.MANIFEST_NAME).write_text(f"{'0' * 64}  {name}\n")
    with pytest.raises(manifest.ManifestMismatch, match="not a path inside the dataset"):
        manifest.verify(tmp_path, "all", 1)


def test_staging_with_a_bad_source_leaves_the_export_untouched(tmp_path, capsys):
    from bench.host.dataset import main

    export = tmp_path / "export"
    (export / "fashion-mnist").mkdir(parents=True)
    (export / "fashion-mnist" / "old.bin").write_bytes(b"earlier stage")
    code = main(["stage", "fashion-mnist", "--src", str(tmp_path / "missing"),
                 "--export", str(export)])
    assert code == 2 and "--src" in capsys.readouterr().err
    assert sorted(p.name for p in export.rglob("*")) == ["fashion-mnist", "old.bin"]


def test_a_listed_file_replaced_by_a_link_fails_even_to_identical_bytes(tmp_path):
    make_dataset(tmp_path)
    (tmp_path / "copy.bin").write_bytes(b"alpha")
    (tmp_path / "copy.bin").chmod(0o600)
    (tmp_path / "train" / "a.bin").unlink()
    (tmp_path / "train" / "a.bin").symlink_to(tmp_path / "copy.bin")
    for mode in ("all", "sample"):
        with pytest.raises(manifest.ManifestMismatch,
                           match="a.bin.* (is a symbolic link|not a regular file)"):
            manifest.verify(tmp_path, mode, 5)


def test_only_the_top_manifest_is_left_out_of_the_listing(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / manifest.MANIFEST_NAME).write_bytes(b"a dataset file by that name")
    (tmp_path / "link.bin").symlink_to(tmp_path / "train" / manifest.MANIFEST_NAME)
    manifest.write(tmp_path)
    assert list(manifest.parse(tmp_path / manifest.MANIFEST_NAME)) == [
        f"train/{manifest.MANIFEST_NAME}"]
