"""The config's `methods:` entries: every method the study runs, each with the settings it owns.

An entry is ``{name, grid, shard_size, memory_budget, calibration_prompts, rewards}``:

- the *reference* entry is the one whose method's declaration says it is the reference
  (``Display.reference``: Best-of-N); its grid's ``n`` is the ladder every other method is measured
  against, ``shard_size`` how the workflow runs it (Bo-N merged from N / shard_size shards, each
  one device's batch), its other grid keys one value each;
- every other entry is one run per combination of its grid (``method_settings``);
- ``memory_budget`` overrides the top-level one for that entry's jobs;
- ``rewards``: the rewards whose pairs the entry runs for (null: every pair; the reference runs for every pair);
- ``calibration_prompts``: held-out prompts whose reference responses, scored at the correlation
  study's decision tokens, give the method's file parameter its fit (adaptive SR); null = none.

No entry takes another's settings: a schedule two methods share is written in both entries.
The sampler variants the methods' steps take are measured by the calibration: `check_calibration_samplers`.
"""

from __future__ import annotations

import itertools


def old_blocks_message(config: dict) -> str | None:
    """One line for a config with the retired `bon:` / `sr:` blocks, showing the entries that say
    the same (None when it has neither)."""
    retired = ("bon", "sr")  # the retired syntax's own keys, which stay as they were whatever the methods are named
    old = [key for key in retired if key in config]
    if not old:
        return None
    from specrej.methods.bon import BEST_OF_N  # the methods the retired blocks ran, named by their declarations
    from specrej.methods.random_halting import RANDOM_HALTING
    from specrej.methods.sr import SPECULATIVE_REJECTION
    from specrej.methods.sr_adaptive import ADAPTIVE

    bon, sr = ((config.get(key) or {}) if key in config else None for key in retired)
    entries = []
    if bon is not None:
        grid = {"n": bon.get("n")} | ({"batch_size": [bon["batch_size"]]} if bon.get("batch_size") else {})
        entries.append({"name": BEST_OF_N.name, "grid": grid, "shard_size": bon.get("shard_size"),
                        "memory_budget": bon.get("memory_budget")})
    if sr is not None:
        schedule = {key: [sr[key]] for key in ("batch_size", "min_tokens", "max_init_batch")
                    if sr.get(key) is not None}
        schedule |= {"decision_tokens": [sr["decision_tokens"]]} if sr.get("decision_tokens") else {}
        entries.append({"name": SPECULATIVE_REJECTION.name, "grid": {"alpha": sr.get("alphas")} | schedule,
                        "memory_budget": sr.get("memory_budget")})
        adaptive = sr.get("adaptive") or {}
        if adaptive.get("deltas"):
            entries.append({"name": ADAPTIVE.name, "grid": {"delta": adaptive["deltas"],
                                                            "alpha": [adaptive.get("fallback_alpha", 0.5)]} | schedule,
                            "calibration_prompts": adaptive.get("calibration_prompts"),
                            "memory_budget": sr.get("memory_budget")})
    shown = "; ".join(_flow({k: v for k, v in entry.items() if v is not None}) for entry in entries)
    return (f"invalid config: {' and '.join(k + ':' for k in old)} {'is' if len(old) == 1 else 'are'} no longer "
            f"read: every method is a methods: entry, each with its own settings (config/README.md); these "
            f"say the same: {shown} (a method that ran SR's schedule, e.g. {RANDOM_HALTING.name}, now names it in its "
            "own grid)")


def _flow(value) -> str:
    """YAML flow style: {name: sr, grid: {alpha: [0.5, 0.9]}}."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    return str(value)


def _method(name: str):
    from specrej.methods import get_method

    return get_method(name)


def is_reference(method) -> bool:
    return bool(method.display and method.display.reference)


def reference(config: dict) -> dict:
    """The reference entry (validated config): {"name", "directory" (its records' method name),
    "ladder" (sorted N), "shard_size", "params" (its other grid keys' one value each),
    "memory_budget"}."""
    entry = next(e for e in config["methods"] if is_reference(_method(e["name"])))
    method = _method(entry["name"])
    return {"name": entry["name"], "directory": method.record_method or method.name,
            "ladder": sorted(entry["grid"]["n"]), "shard_size": entry.get("shard_size"),
            "params": {key: values[0] for key, values in entry["grid"].items() if key != "n"},
            "batch_param": method.batch_param, "memory_budget": entry.get("memory_budget")}


def fit_entry(config: dict) -> dict | None:
    """The entry that fits on held-out prompts (`calibration_prompts`), or None."""
    return next((e for e in config["methods"] if e.get("calibration_prompts")), None)


def calibration_select(config: dict) -> list[int]:
    """Row indices of the held-out prompts a method fits on ([] when none does)."""
    entry = fit_entry(config)
    return list(entry["calibration_prompts"]) if entry else []


def fit_param(method) -> str | None:
    """The method's file parameter, which takes the held-out fit (None: it declares none, or several)."""
    files = [p.name for p in method.params if p.type == "path"]
    return files[0] if len(files) == 1 else None


def method_settings(config: dict) -> dict[tuple[str, str], dict]:
    """{(method directory, setting name): {"spec", "params", "fit_param", "memory_budget", "rewards"}} of every
    run of the method_run rule: each entry but the reference at every combination of its grid, in
    the config's order, an entry that fits on held-out prompts last. The directory is the method's
    record name (its `record_method`, else its name), the setting its `Method.setting_name`.
    `fit_param`: the parameter that takes the pair's held-out fit (a file the workflow makes, so
    also the job's input), or None; `rewards`: the reward names whose pairs it runs for (None: every pair)."""
    entries = [e for e in config["methods"] if not is_reference(_method(e["name"]))]
    entries.sort(key=lambda e: bool(e.get("calibration_prompts")))  # stable: the config's order otherwise
    runs = {}
    for entry in entries:
        method = _method(entry["name"])
        keys = list(entry.get("grid", {}))
        directory = method.record_method or method.name
        fit = fit_param(method) if entry.get("calibration_prompts") else None
        for values in itertools.product(*(entry["grid"][key] for key in keys)):
            params = dict(zip(keys, values))
            runs[(directory, method.setting_name(method.check(params)))] = {
                "spec": entry["name"], "params": params, "fit_param": fit, "memory_budget": entry.get("memory_budget"),
                "rewards": entry.get("rewards")}
    return runs


def check_methods(config: dict):
    """Yield one message per `methods:` problem: an unknown method or parameter, a value out of
    range, a file parameter naming no file, a required parameter missing from the grid, a
    combination the method's `requires` refuses (each naming ``methods[i].grid.key``); no reference
    entry or two; reference-only keys elsewhere; more than one entry fitting on held-out prompts."""
    from specrej.errors import SpecrejError

    seen, references, fitting = {}, [], []
    for i, entry in enumerate(config["methods"]):
        try:
            method = _method(entry["name"])
        except SpecrejError as error:
            yield f"methods[{i}].name: {error}"
            continue
        grid = entry.get("grid", {})
        problems = {f"methods[{i}].grid.{key}: {method._unknown(key)}": None  # an unknown key
                    for key in grid if key not in {p.name for p in method.params}}
        for values in [] if problems else itertools.product(*grid.values()):  # values, required keys, relations
            try:
                method.check(dict(zip(grid, values)), lambda name, i=i: f"methods[{i}].grid.{name}")
            except SpecrejError as error:
                problems[str(error)] = None
        yield from problems
        if is_reference(method):
            references.append(i)
            yield from _reference_problems(i, entry, method)
            if entry.get("rewards"):
                yield (f"methods[{i}].rewards: the reference method runs for every pair (each pair's other methods are "
                       "measured against its curve); drop the key")
        elif entry.get("shard_size"):
            yield f"methods[{i}].shard_size: only the reference method's entry has shards ({method.name} is not the reference)"
        if entry.get("calibration_prompts"):
            fitting.append(i)
            if fit_param(method) is None:
                yield (f"methods[{i}].calibration_prompts: {method.name} declares no single file parameter "
                       "to take the held-out fit")
        for name in entry.get("rewards") or []:
            if name not in config["rewards"]:
                yield f"methods[{i}].rewards: {name!r} is not defined under rewards"
        if method.name in seen:
            yield f"methods[{i}].name: {method.name} is listed twice (methods[{seen[method.name]}]); merge the grids"
        seen[method.name] = i
    if not references:
        yield ("methods: no reference method: list the one every other method is measured against, e.g. "
               "{name: bon, grid: {n: [16, 32, 64]}, shard_size: 16}")
    if len(references) > 1:
        yield f"methods: {', '.join(f'methods[{i}]' for i in references)} are each a reference method; keep one"
    if len(fitting) > 1:
        yield (f"methods: {', '.join(f'methods[{i}].calibration_prompts' for i in fitting)}: one entry fits on "
               "held-out prompts")


def _reference_problems(i: int, entry: dict, method):
    grid = entry.get("grid", {})
    if "n" not in grid:
        yield f"methods[{i}].grid.n: the reference's ladder (the N of each run) is required"
    several = [key for key, values in grid.items() if key != "n" and len(values) > 1]
    if several:
        yield (f"methods[{i}].grid.{several[0]}: the reference's ladder runs over n only; give "
               f"{several[0]} one value")
    shard = entry.get("shard_size")
    uneven = [n for n in grid.get("n", []) if shard and n > shard and n % shard]
    if uneven:
        yield (f"methods[{i}].grid.n: {', '.join(map(str, uneven))} above shard_size={shard} must be multiples "
               "of it (Bo-N is merged from N / shard_size shards)")
    if entry.get("calibration_prompts"):
        yield f"methods[{i}].calibration_prompts: the reference method fits on nothing"


def check_calibration_samplers(config: dict):
    """Yield a message where calibration.samplers leaves out the variant that `sampling` makes of every
    step (the extras, certainty and top-logprobs, are the methods' and rewards': named when costed)."""
    from specrej.records.step_profile import step_variant

    listed, sampling = config["calibration"]["samplers"], config["sampling"]
    made = step_variant(sampling["temperature"], sampling["top_k"], sampling["top_p"])
    if listed is not None and not any(name.split("+")[0] == made for name in listed):
        yield (f"calibration.samplers: every step of this sampling (top_k {sampling['top_k']}, top_p "
               f"{sampling['top_p']}, temperature {sampling['temperature']}) is {made!r}, not measured "
               f"(listed: {', '.join(listed)})")
