"""What a method may use is a versioned contract (docs/methods.md, "The method surface"): its
reference in the repository names every member with its signature, and matches the code; the
surface as it is now is recorded here with the version it belongs to, so a change to it fails
until the version is bumped and CHANGELOG.md says what changed; a method written against 0.1.0's
names fails with one line naming what replaced each; `run` must return a dict; a method's name is
a safe folder name; a row count has an upper bound; the session gives the prompt's id."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import specrej
from specrej.cli.main import main
from specrej.errors import SpecrejError
from specrej.methods import Method, Param, base, built_in, surface
from specrej.records.io import read_records

ROOT = Path(__file__).resolve().parents[1]
METHODS_PAGE = ROOT / "docs" / "methods.md"
CHANGELOG = ROOT / "CHANGELOG.md"


# ------------------------------------------------------------------------------------------
# the surface, rendered from the code: one line per member, as the reference names it
# ------------------------------------------------------------------------------------------

def _signature(function, prefix: str, name: str) -> str:
    """`prefix.name(arguments) -> returns`, as written: annotations of the arguments left out, the
    return's kept; `self` dropped; a session call's old-call guard (`surface.refuses`) looked through."""
    signature = inspect.signature(inspect.unwrap(function))
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    plain = signature.replace(parameters=parameters[1:], return_annotation=inspect.Signature.empty)
    returns = signature.return_annotation
    return f"{prefix}.{name}{plain}" + ("" if returns is inspect.Signature.empty else f" -> {returns}")


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return f" = {field.default!r}"
    if field.default_factory is not dataclasses.MISSING:
        return f" = {field.default_factory()!r}"
    return ""


def protocol_lines(protocol, prefix: str) -> list[str]:
    """A protocol's members: `prefix.name: type` for an attribute or a property, the signature for a call."""
    lines = [f"{prefix}.{name}: {kind}" for name, kind in protocol.__annotations__.items()]
    for name, member in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            lines.append(f"{prefix}.{name}: {inspect.signature(member.fget).return_annotation}")
        elif callable(member):
            lines.append(_signature(member, prefix, name))
    return lines


def record_lines(cls, prefix: str) -> list[str]:
    """A dataclass's fields, `prefix.name: type = default`, and its properties."""
    lines = [f"{prefix}.{f.name}: {f.type}{_default(f)}" for f in dataclasses.fields(cls)]
    return lines + [f"{prefix}.{name}: {inspect.signature(m.fget).return_annotation}"
                    for name, m in vars(cls).items() if isinstance(m, property)]


def surface_lines() -> dict[str, list[str]]:
    """The whole method surface, by part: what a method's `run` and `requires` get and return (their
    contract, written here), what the session, a batch, a candidate and a round offer, what a method
    declares (Method, Param, Display) and how it reads its checked Params."""
    params = [_signature(base.Params.replace, "params", "replace"), "params.loaded: dict",
              "params.NAME", 'params["NAME"]']
    return {"run and requires": ["run(session, params) -> dict", "requires(values) -> str | None"],
            "MethodSession": protocol_lines(surface.MethodSession, "session"),
            "Batch": protocol_lines(surface.Batch, "batch"),
            "Candidate": record_lines(surface.Candidate, "candidate"),
            "Round": record_lines(surface.Round, "Round"),
            "Method": record_lines(base.Method, "Method"),
            "Param": record_lines(base.Param, "Param"),
            "Display": record_lines(base.Display, "Display"),
            "Params": params}


# The surface of the version that last changed it. A change to the surface fails here: bump the
# version (pyproject.toml, specrej/__init__.py), say what changed in CHANGELOG.md, document it in
# docs/methods.md ("The method surface"), and record the new surface here with the new version.
SURFACE_VERSION = "0.3.0"
SURFACE = """
run(session, params) -> dict
requires(values) -> str | None
session.prompt: str
session.prompt_id: int | str | None
session.prompt_ids: list[int]
session.sampling: SamplingParams
session.seed: int
session.memory_budget: int
session.capacity: int
session.rows_that_fit(length) -> int
session.full_length_batch(given, most=None, *, name='a batch', option='the batch size') -> int
session.candidates: Sequence[Candidate]
session.rounds: Sequence[Round]
session.next_round: int
session.prompt_layer_states: torch.Tensor
session.start(rows, max_len=None, *, layer_states=False, top_logprobs=0) -> Batch
session.decode(batch, until=()) -> list[Candidate]
session.make_room(batch) -> bool
session.step(batch) -> list[Candidate]
session.stop_layer_states(batch) -> None
session.live(batch) -> list[Candidate]
session.score_partial(candidates) -> list[float]
session.score_final(candidates) -> list[float]
session.halt(candidates, round_index) -> None
session.record_round(decision) -> int
session.reserve(num_bytes) -> None
session.answer(candidate) -> str | None
batch.length: int
batch.num_rows: int
batch.needs_room: bool
batch.candidate_ids: torch.Tensor
batch.tokens: torch.Tensor
batch.logprobs: torch.Tensor
batch.sampled_ids: torch.Tensor | None
batch.top_logprobs: torch.Tensor | None
batch.layer_states: torch.Tensor | None
candidate.id: int
candidate.text: str = ''
candidate.token_ids: list[int] = []
candidate.token_logprobs: list[float] = []
candidate.finished: bool = False
candidate.complete: bool = False
candidate.halted_round: int | None = None
candidate.round_scores: list[float] = []
candidate.final_score: float | None = None
candidate.token_certainties: list[float] = []
candidate.num_tokens: int
Round.decision_token: int
Round.batch_before: int
Round.batch_after: int
Round.ranked: int = 0
Round.rule: dict = {}
Method.name: str
Method.description: str
Method.params: tuple[Param, ...]
Method.run: Callable[[MethodSession, Params], dict]
Method.label: Callable[[Mapping], str]
Method.display: Display | None = None
Method.batch_param: str | None = None
Method.record_method: str | None = None
Method.setting_keys: tuple[str, ...] = ()
Method.step_seconds: float | None = None
Method.requires: Callable[[Mapping], str | None] | None = None
Method.selection: str = 'reward'
Param.name: str
Param.type: str
Param.default: object = None
Param.required: bool = False
Param.low: float | None = None
Param.high: float | None = None
Param.low_open: bool = False
Param.high_open: bool = False
Param.choices: tuple[str, ...] = ()
Param.help: str = ''
Param.flag: str | None = None
Param.read: Callable[[str], object] | None = None
Param.option: str
Display.name: str
Display.color: str
Display.marker: str = 'o'
Display.reference: bool = False
params.replace(**changes) -> Params
params.loaded: dict
params.NAME
params["NAME"]
"""


def test_the_surface_is_the_one_its_version_recorded():
    rendered = "\n".join(line for lines in surface_lines().values() for line in lines)
    assert rendered == SURFACE.strip(), (
        "the method surface changed: bump specrej's version, say what changed in CHANGELOG.md, document it in "
        "docs/methods.md and record it here (SURFACE, SURFACE_VERSION)")
    assert SURFACE_VERSION == specrej.__version__ or _version(SURFACE_VERSION) < _version(specrej.__version__)
    assert f"## [{SURFACE_VERSION}]" in CHANGELOG.read_text(encoding="utf-8")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_every_member_of_the_surface_is_in_the_reference_with_its_signature():
    """docs/methods.md's "The method surface" names each member as the code has it, in one
    `code` span at the start of its line (what it is follows)."""
    page = METHODS_PAGE.read_text(encoding="utf-8")
    reference = page.split("## The method surface", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- `([^`]+)`", reference, flags=re.M))
    missing = {part: [line for line in lines if line not in listed] for part, lines in surface_lines().items()}
    assert {part: lines for part, lines in missing.items() if lines} == {}
    stale = listed - {line for lines in surface_lines().values() for line in lines}
    assert stale == set(), f"the reference lists what the surface does not have: {sorted(stale)}"
    for name in specrej.methods.__all__:  # every name the package exports to a method is in it
        assert f"`{name}`" in reference, name


def test_the_session_implements_each_call_with_the_surfaces_arguments():
    """The same arguments, names and defaults (a call may return a subtype: `RolloutBatch` for `Batch`)."""
    from specrej.methods.session import RolloutBatch, Session

    def arguments(function, name):
        return _signature(function, "s", name).split(" -> ")[0]

    for protocol, cls in ((surface.MethodSession, Session), (surface.Batch, RolloutBatch)):
        for name, member in vars(protocol).items():
            if callable(member) and not name.startswith("_"):
                assert arguments(getattr(cls, name), name) == arguments(member, name), name


# ------------------------------------------------------------------------------------------
# the version, and the changelog
# ------------------------------------------------------------------------------------------

def test_one_version_in_the_package_the_project_and_the_changelog():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == specrej.__version__
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", CHANGELOG.read_text(encoding="utf-8"),
                          flags=re.M)
    assert releases[0] == specrej.__version__ and releases[-1] == "0.1.0"
    assert releases == sorted(releases, key=_version, reverse=True)
    page = METHODS_PAGE.read_text(encoding="utf-8")
    assert "CHANGELOG.md" in page and "bumps specrej's version" in page


@pytest.mark.parametrize("old", sorted(surface.REMOVED))
def test_each_removed_name_has_its_changelog_line_and_one_line_naming_its_replacement(old):
    version, new = surface.REMOVED[old]
    changelog = CHANGELOG.read_text(encoding="utf-8")
    section = changelog.split(f"## [{version}]", 1)[1].split("\n## [", 1)[0]
    named = re.match(r"([\w.]+)(?:\((\w+)=)?", old)
    assert (named[2] or named[1]) in section, f"CHANGELOG.md's {version} does not name {old}"
    assert surface.replaced(old) == f"{old} was replaced by {new} in specrej {version} (CHANGELOG.md)"


# ------------------------------------------------------------------------------------------
# a method written against 0.1.0, and a run that returns no dict
# ------------------------------------------------------------------------------------------

OLD_METHODS = textwrap.dedent('''
    """Methods as the 2026-12-03 docs (specrej 0.1.0) wrote them, one that returns no dict, and one
    that records the prompt's id it was given."""
    from specrej.methods import Method, Param, Round


    def old_round(session, params):
        batch = session.start(params.n)
        session.decode(batch, until=[4])
        live = session.live(batch)
        session.record_round(Round(decision_token=batch.length, batch_before=len(live), batch_after=1,
                                   ranked=len(live), kept=1, accepted=1, cutoff=0.5, memory_guard_halted=0,
                                   rule={"rule": "old"}))
        return {"n": params.n}


    def old_positional_round(session, params):
        session.record_round(Round(4, 2, 1, 2, 1, 1, 0.5, 0, {}))
        return {"n": params.n}


    def old_halt(session, params):
        batch = session.start(params.n)
        session.decode(batch, until=[4])
        live = session.live(batch)
        session.halt(batch, live[1:], 0)
        return {"n": params.n}


    def old_has_room(session, params):
        batch = session.start(params.n)
        session.has_room(batch)
        return {"n": params.n}


    def old_collect_layer_states(session, params):
        batch = session.start(params.n, layer_states=True)
        batch.collect_layer_states = False
        return {"n": params.n}


    def returns_a_list(session, params):
        batch = session.start(params.n)
        session.decode(batch)
        return [("n", params.n)]


    def records_its_prompt_id(session, params):
        batch = session.start(params.n)
        session.decode(batch)
        return {"n": params.n, "seen_prompt_id": session.prompt_id}


    def method(run):
        return Method(name=run.__name__.replace("_", "-"), description=run.__name__, run=run,
                      params=(Param("n", "int", default=2, low=1),), label=lambda p: run.__name__)


    OLD_ROUND, OLD_POSITIONAL_ROUND, OLD_HALT, OLD_HAS_ROOM, OLD_COLLECT_LAYER_STATES, RETURNS_A_LIST, \\
        RECORDS_ITS_PROMPT_ID = map(method, (old_round, old_positional_round, old_halt, old_has_room,
                                             old_collect_layer_states, returns_a_list, records_its_prompt_id))
''')


@pytest.fixture
def old_methods(tmp_path, monkeypatch):
    (tmp_path / "old_methods.py").write_text(OLD_METHODS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "old_methods", raising=False)
    monkeypatch.setenv("SPECREJ_MEASURE_MEMORY", "0")
    import old_methods

    return old_methods


def generate(generator_dir, prompts, out, *extra) -> int:
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", *extra])


@pytest.mark.parametrize(("attribute", "message"), [
    ("OLD_ROUND", "TypeError: Round(kept=...) was replaced by Round(..., rule={'kept': ...}) in specrej 0.2.0 "
                  "(CHANGELOG.md)"),
    ("OLD_POSITIONAL_ROUND", "TypeError: Round(decision_token, batch_before, batch_after, ranked, kept, accepted, "
                             "cutoff, memory_guard_halted, rule) was replaced by Round(decision_token, batch_before, "
                             "batch_after, ranked=0, rule={...}) in specrej 0.2.0 (CHANGELOG.md)"),
    ("OLD_HALT", "TypeError: session.halt(rollout, candidates, round_index) was replaced by "
                 "session.halt(candidates, round_index) in specrej 0.2.0 (CHANGELOG.md)"),
    ("OLD_HAS_ROOM", "AttributeError: session.has_room(rollout) was replaced by session.make_room(batch) in "
                     "specrej 0.2.0 (CHANGELOG.md)"),
    ("OLD_COLLECT_LAYER_STATES", "AttributeError: rollout.collect_layer_states = False was replaced by "
                                 "session.stop_layer_states(batch) in specrej 0.2.0 (CHANGELOG.md)"),
    ("RETURNS_A_LIST", "TypeError: method returns-a-list's run must return a dict (its setting as it ran, which "
                       "the record's params hold), got list"),
])
def test_a_method_written_against_010_fails_with_one_line_naming_the_replacement(
        attribute, message, old_methods, generator_dir, one_prompt, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    name = getattr(old_methods, attribute).name
    assert generate(generator_dir, one_prompt, out, "--method", f"python:old_methods:{attribute}") == 2
    assert read_records(out)[0]["error"] == f"{name} failed: {message}"
    stopped = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specrej: error:")]
    assert len(stopped) == 1 and message in stopped[0]


def test_a_round_with_other_unknown_fields_keeps_its_own_error(engine):
    from specrej.methods.prompt_run import call_run
    from specrej.methods.session import Session
    from specrej.rewards.reward import LogProbReward

    def run(session, params):
        return surface.Round(1, 1, 1, beam=2)

    session = Session(engine, LogProbReward(), "Write a poem.", specrej.SamplingParams(max_new_tokens=4), seed=0)
    method = Method(name="beam", description="beam", params=(), run=run, label=str)
    with pytest.raises(TypeError, match=r"^Round.__init__\(\) got an unexpected keyword argument 'beam'$"):
        call_run(method, session, {})


# ------------------------------------------------------------------------------------------
# the prompt's id on the surface
# ------------------------------------------------------------------------------------------

def test_the_session_gives_the_prompts_id(engine):
    from specrej.api import run_one
    from specrej.methods.prompt_run import run_method
    from specrej.rewards.reward import LogProbReward

    seen = []

    def run(session, params):
        seen.append(session.prompt_id)
        batch = session.start(2)
        session.decode(batch)
        return {}

    method = Method(name="sees-its-id", description="sees its id", params=(), run=run, label=str)
    sampling = specrej.SamplingParams(max_new_tokens=4)
    run_method(method, method.check({}), engine, LogProbReward(), "Write a poem.", sampling=sampling,
               prompt_id="alpaca-7")
    run_one(engine, LogProbReward(), "Write a poem.", method=method, sampling=sampling)  # a prompt run alone
    assert seen == ["alpaca-7", None]


def test_a_method_sees_each_prompts_id_from_the_prompts_file(old_methods, generator_dir, tmp_path):
    prompts = tmp_path / "p.json"
    prompts.write_text('[{"prompt_id": "sea", "prompt": "Write a poem about the sea."}, '
                       '{"prompt_id": 7, "prompt": "List three fruits."}]')
    out = tmp_path / "out.jsonl"
    assert generate(generator_dir, prompts, out, "--method", "python:old_methods:RECORDS_ITS_PROMPT_ID") == 0
    assert [r["params"]["seen_prompt_id"] for r in read_records(out)] == ["sea", 7]


# ------------------------------------------------------------------------------------------
# a method's name, and the upper bound of a row count
# ------------------------------------------------------------------------------------------

def test_every_built_in_name_is_a_safe_folder_name():
    for method in built_in().values():
        assert base.NAME.fullmatch(method.name) and (method.record_method is None
                                                     or base.NAME.fullmatch(method.record_method))


@pytest.mark.parametrize("name", ["My Method", "../up", "a/b", "", "-dash-first", "x" * 65, "méthode", None, 3])
def test_a_method_name_that_is_no_safe_folder_name_is_refused_where_it_is_declared(name):
    with pytest.raises(SpecrejError) as error:
        Method(name=name, description="d", params=(), run=None, label=str)
    assert str(error.value).startswith("a method's name must be lowercase letters, digits, '-' and '_'")
    assert "\n" not in str(error.value)
    with pytest.raises(SpecrejError, match="^a method's record_method must be"):
        Method(name="fine", description="d", params=(), run=None, label=str, record_method="Not/Fine")


def test_a_declared_name_that_is_refused_stops_the_run_in_one_line(generator_dir, one_prompt, tmp_path, monkeypatch,
                                                                   capsys):
    (tmp_path / "badly_named.py").write_text(
        "from specrej.methods import Method\nBAD = Method(name='Bad Name', description='d', params=(), run=None, "
        "label=str)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert generate(generator_dir, one_prompt, tmp_path / "o.jsonl", "--method", "python:badly_named:BAD") == 2
    assert capsys.readouterr().err.startswith("specrej: error: a method's name must be lowercase letters")
    assert not (tmp_path / "o.jsonl").exists()


ROW_COUNTS = [(name, param.name) for name, method in built_in().items() for param in method.params
              if param.name in ("n", "batch_size", "n_init", "round_size", "min_open", "max_init_batch")]


def test_every_row_count_of_the_built_in_methods_is_bounded():
    assert {param for _, param in ROW_COUNTS} == {"n", "batch_size", "n_init", "round_size", "min_open",
                                                  "max_init_batch"}
    for name, param in ROW_COUNTS:
        assert built_in()[name].param(param).high == base.MAX_ROWS == 2**20, (name, param)


@pytest.mark.parametrize(("method", "option", "given"), [
    ("bon", "--n", {"n": 2**20 + 1}),
    ("bon", "--batch-size", {"n": 4, "batch_size": 2**40}),
    ("st-bon", "--n", {"n": 10**12}),
    ("sr", "--batch-size", {"alpha": 0.5, "batch_size": 2**20 + 1}),
])
def test_a_row_count_past_the_bound_is_refused_naming_the_option(method, option, given):
    with pytest.raises(SpecrejError) as error:
        built_in()[method].check(given)
    value = next(v for k, v in given.items() if option.endswith(k.replace("_", "-")))
    assert str(error.value) == f"{option} must be <= 1048576, got {value}"
    assert built_in()[method].check({**given, option.lstrip("-").replace("-", "_"): 2**20})  # the bound itself is fine


def test_a_row_count_past_the_bound_fails_on_the_command_line_before_any_model_loads(tmp_path, one_prompt, capsys):
    out = tmp_path / "o.jsonl"
    assert generate(tmp_path / "no-model", one_prompt, out, "--method", "bon", "--n", "2000000") == 2
    assert capsys.readouterr().err == "specrej: error: --n must be <= 1048576, got 2000000\n"
    assert not out.exists()


def test_the_bound_reads_as_a_whole_number():
    assert Param("n", "int", low=1, high=base.MAX_ROWS).range_text() == "in [1, 1048576]"
    with pytest.raises(SpecrejError, match=r"^--param n must be >= 1, got 0$"):
        Param("n", "int", low=1, high=base.MAX_ROWS).check(0, "m")
    with pytest.raises(SpecrejError, match=r"^--param x must be in \[0, 1\), got 1.5$"):  # a number: its range
        Param("x", "float", low=0, high=1, high_open=True).check(1.5, "m")
