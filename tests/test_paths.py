"""bench.paths.remove_tree_inside, and the dataset export's removal that relies on it: a
directory is removed only once it is proven, resolved, to lie inside the export."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.host.dataset import _remove
from bench.options import ConfigError
from bench.paths import remove_tree_inside, temporary_tree


def test_a_directory_inside_its_parent_is_removed(tmp_path):
    (tmp_path / "export" / "a" / "b").mkdir(parents=True)
    remove_tree_inside(tmp_path / "export" / "a" / "b", tmp_path / "export", "--name")
    assert not (tmp_path / "export" / "a" / "b").exists()
    assert (tmp_path / "export" / "a").is_dir()


@pytest.mark.parametrize("relative", ["export", "export/..", "outside", "export/a/../../outside"])
def test_the_parent_itself_and_anything_outside_it_are_refused(tmp_path, relative):
    (tmp_path / "export" / "a").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    with pytest.raises(ConfigError) as error:
        remove_tree_inside(tmp_path / relative, tmp_path / "export", "--name")
    assert "--name" in str(error.value) and "nothing was removed" in str(error.value)
    assert ("itself, not to a directory inside it" in str(error.value)) == (relative == "export")
    assert (tmp_path / "export" / "a").is_dir() and (tmp_path / "outside").is_dir()


def test_a_link_through_a_directory_that_leaves_the_parent_is_refused(tmp_path):
    (tmp_path / "export").mkdir()
    (tmp_path / "outside" / "data").mkdir(parents=True)
    (tmp_path / "export" / "via").symlink_to(tmp_path / "outside")
    with pytest.raises(ConfigError):
        remove_tree_inside(tmp_path / "export" / "via" / "data", tmp_path / "export", "--name")
    assert (tmp_path / "outside" / "data").is_dir()


def test_remove_deletes_a_directory_inside_the_export_and_unlinks_a_link(tmp_path):
    export = tmp_path / "export"
    (export / "old" / "sub").mkdir(parents=True)
    (tmp_path / "keep").mkdir()
    (export / "link").symlink_to(tmp_path / "keep")
    _remove(export / "old", export)
    _remove(export / "link", export)
    assert sorted(p.name for p in export.iterdir()) == []
    assert (tmp_path / "keep").is_dir()   # a link is unlinked, never followed


def test_remove_refuses_a_directory_reached_through_a_link_out_of_the_export(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    (tmp_path / "outside" / "data").mkdir(parents=True)
    (export / "via").symlink_to(tmp_path / "outside")
    with pytest.raises(ConfigError):
        _remove(export / "via" / "data", export)
    assert (tmp_path / "outside" / "data").is_dir()


def test_a_results_file_that_is_a_link_is_refused_before_anything_is_written(tmp_path):
    from bench.paths import check_writable_file

    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    (tmp_path / "runs.jsonl").symlink_to(target)
    with pytest.raises(ConfigError, match="--results=.*is a symbolic link"):
        check_writable_file(tmp_path / "runs.jsonl", "--results")


def test_a_temporary_tree_is_removed_however_its_block_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)   # read TMPDIR again
    with temporary_tree("bench-t-", "the test's directory") as path:
        (path / "sub").mkdir()
        (path / "sub" / "file").write_text("x")
    with pytest.raises(RuntimeError), temporary_tree("bench-t-", "the test's directory"):
        raise RuntimeError("the block's own error goes out")
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_tree_turned_into_a_link_out_is_left_with_a_warning(tmp_path, monkeypatch,
                                                                       capsys):
    temp, outside = tmp_path / "tmp", tmp_path / "outside"
    temp.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("x")
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)
    with temporary_tree("bench-t-", "the test's directory") as path:
        path.rmdir()
        path.symlink_to(outside)
    assert (outside / "keep").read_text() == "x"
    err = capsys.readouterr().err
    assert "could not remove the test's directory" in err and "not inside" in err


def _calls_named(tree: ast.AST, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and name in (getattr(node.func, "attr", None), getattr(node.func, "id", None))]


def test_every_tree_removal_in_bench_goes_through_the_proof():
    """bench/ removes a directory tree in one place only, remove_tree_inside, after it has
    resolved the path and proven it inside its parent: any other rmtree (shutil's, or one
    imported under its own name) would remove what nothing checked."""
    bench = Path(__file__).resolve().parent.parent / "bench"
    found = [(source.relative_to(bench).as_posix(), call.lineno)
             for source in sorted(bench.rglob("*.py"))
             for call in _calls_named(ast.parse(source.read_text(), str(source)), "rmtree")]
    proof = next(node for node in ast.walk(ast.parse((bench / "paths.py").read_text()))
                 if isinstance(node, ast.FunctionDef) and node.name == "remove_tree_inside")
    (removal,) = _calls_named(proof, "rmtree")
    assert found == [("paths.py", removal.lineno)], "rmtree outside remove_tree_inside"
    checked = {call.func.attr for call in ast.walk(proof) if isinstance(call, ast.Call)
               and isinstance(call.func, ast.Attribute) and call.lineno < removal.lineno}
    assert {"resolve", "is_relative_to"} <= checked
