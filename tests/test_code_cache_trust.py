"""The caches that hold code (`--compile on`'s graphs in $SPECREJ_CACHE/compiled, inductor's graphs
and built kernels in $SPECREJ_CACHE/inductor) are used only where this user alone can change them
(`graph_cache.refuse_untrusted`): anything else is refused in one line, with nothing written. And
a model cache entry is on disk before it is renamed into place (`models.cache.build_once`).

The tests run as root, which permission checks do not stop: they set mode bits and owners and
check what specrej makes of them, not whether another user could write."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specrej.cli.main import main
from specrej.engine.graph_cache import inductor_cache, refuse_untrusted
from specrej.errors import SpecrejError
from specrej.models.cache import build_once


def refusal(path: Path, problem: str, setting: str = "SPECREJ_CACHE") -> str:
    return (f"refusing to load compiled code from {path}: it is {problem}, and whoever can write there runs code "
            f"in this process; run `chmod -R go-w {path}`, or set {setting} to a folder of your own")


def modes(root: Path) -> dict[str, int]:
    """Every path under `root` (and `root`) with its permission bits: what a refusal must leave as it was."""
    return {str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode) for path in [root, *root.rglob("*")]}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty $SPECREJ_CACHE of this user's, writable by it alone; inductor's cache chosen by specrej."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o755)
    monkeypatch.setenv("SPECREJ_CACHE", str(cache))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # inductor's cache chosen by specrej
    return cache


def test_a_group_writable_compiled_graph_cache_is_refused_in_one_line_and_nothing_is_written(
        cache, generator_dir, prompts_file, tmp_path, capsys):
    compiled = cache / "compiled"
    compiled.mkdir()
    compiled.chmod(0o775)
    before = modes(cache)
    out = tmp_path / "out.jsonl"
    status = main(["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(out),
                   "--method", "bon", "--n", "2", "--max-new-tokens", "4", "--compile", "on", "--no-progress"])
    assert status == 2
    err = capsys.readouterr().err  # before it, transformers' bar of the weights loading
    assert err.endswith(f"\nspecrej: error: {refusal(compiled, 'writable by its group')}\n")
    assert "Traceback" not in err
    assert modes(cache) == before and not out.exists()


def test_a_group_and_world_writable_inductor_cache_is_refused(cache):
    inductor = cache / "inductor"
    inductor.mkdir()
    inductor.chmod(0o777)
    before = modes(cache)
    with pytest.raises(SpecrejError) as error, inductor_cache():
        pass
    assert str(error.value) == refusal(inductor, "writable by its group and others")
    assert modes(cache) == before and "TORCHINDUCTOR_CACHE_DIR" not in os.environ


def test_a_cache_others_can_write_is_refused_unless_it_is_sticky(cache):
    cache.chmod(0o775)  # a group member could rename $SPECREJ_CACHE/inductor and put their own in its place
    with pytest.raises(SpecrejError) as error, inductor_cache():
        pass
    assert str(error.value) == refusal(cache, "writable by its group")
    assert modes(cache) == {".": 0o775}

    cache.chmod(0o1777)  # sticky, as /tmp is: no one renames what another put there
    with inductor_cache() as directory:
        assert directory == str(cache / "inductor") == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert modes(cache) == {".": 0o1777, "inductor": 0o700}
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # set for the block only


def test_inductor_cache_is_ours_within_the_block_and_the_processs_own_after(cache, tmp_path, monkeypatch):
    own = tmp_path / "own-inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(own))  # the user's own choice: specrej uses it too
    with inductor_cache() as directory:
        assert directory == str(own)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(own)
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # torch's default, written by torch itself
    with inductor_cache() as directory:
        assert directory == os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache / "inductor")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()


def test_a_users_own_cache_is_used_and_its_code_folders_are_made_owner_only(tmp_path, monkeypatch):
    cache = tmp_path / "new" / "cache"
    monkeypatch.setenv("SPECREJ_CACHE", str(cache))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    mask = os.umask(0o002)  # a umask that makes group-writable folders: specrej's own are not
    try:
        with inductor_cache() as directory:
            assert directory == str(cache / "inductor")
    finally:
        os.umask(mask)
    assert modes(cache) == {".": 0o755, "inductor": 0o700}


def test_a_group_writable_compiled_graph_is_refused_by_its_path(cache):
    entry = cache / "compiled" / "0123456789abcdef"
    entry.mkdir(parents=True)
    for folder in (entry.parent, entry):
        folder.chmod(0o755)  # as earlier versions made them: others may enter
    graph = entry / "step-2-64.bin"
    graph.write_bytes(b"a pickle torch would load")
    graph.chmod(0o664)
    with pytest.raises(SpecrejError) as error:
        refuse_untrusted(entry, cache, "SPECREJ_CACHE")
    assert str(error.value) == refusal(graph, "writable by its group")

    graph.chmod(0o644)
    refuse_untrusted(entry, cache, "SPECREJ_CACHE")  # writable by its owner alone: used

    graph.chmod(0o664)
    entry.chmod(0o700)  # owner-only, as specrej makes it: no one else reaches the graph inside
    refuse_untrusted(entry, cache, "SPECREJ_CACHE")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_a_code_cache_that_belongs_to_another_user_is_refused(cache):
    import pwd

    nobody = pwd.getpwnam("nobody")
    inductor = cache / "inductor"
    inductor.mkdir(mode=0o755)
    os.chown(inductor, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(SpecrejError) as error, inductor_cache():
        pass
    assert str(error.value) == (f"refusing to load compiled code from {inductor}: it belongs to user nobody, and "
                                "whoever can write there runs code in this process; set SPECREJ_CACHE to a "
                                "folder of your own")


def test_an_inductor_cache_the_user_chose_is_checked_and_named_in_the_fix(cache, tmp_path, monkeypatch):
    chosen = tmp_path / "team" / "inductor"
    chosen.mkdir(parents=True)
    chosen.chmod(0o770)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    with pytest.raises(SpecrejError) as error, inductor_cache():
        pass
    assert str(error.value) == refusal(chosen, "writable by its group", "TORCHINDUCTOR_CACHE_DIR")


def test_a_model_cache_entry_is_on_disk_before_and_after_its_rename(tmp_path, monkeypatch):
    """A crash just after the rename leaves a whole entry: its files and its folder are flushed
    (fsync) before the rename, and the cache folder, which holds the rename, after it."""
    events = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    monkeypatch.setattr(os, "rename", lambda src, dst: (events.append(("rename", str(src))), real_rename(src, dst)))

    def build(out: Path) -> None:
        (out / "weights.safetensors").write_bytes(b"x" * 1000)
        (out / "config.json").write_text("{}")

    entry = tmp_path / "cache" / "model"
    build_once(entry, build, "a stand-in model")
    tmp = next(event[1] for event in events if isinstance(event, tuple))
    assert sorted(events[:2]) == [f"{tmp}/config.json", f"{tmp}/weights.safetensors"]
    assert events[2:] == [tmp, ("rename", tmp), str(entry.parent)]


def test_the_model_cache_a_build_creates_is_writable_by_its_owner_alone(tmp_path):
    """Whatever the umask: a cache its group could write would be refused for compiled code."""
    mask = os.umask(0o002)
    try:
        build_once(tmp_path / "cache" / "model", lambda out: (out / "config.json").write_text("{}"), "a stand-in model")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o755
