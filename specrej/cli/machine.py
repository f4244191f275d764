"""`specrej compile | calibrate`: what a machine measures once, kept beside its compiled graphs:
the graphs themselves with eager against compiled (`compile`), and its step costs, which eq. 7's
modelled compute applies to each record's steps (`calibrate`). Parsing and printing; the work is
the engine's (`engine.graph_build`, `engine.calibration`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..errors import SpecrejError


def compile_graphs(args: argparse.Namespace) -> None:
    """`specrej compile`: the graphs built and measured (`graph_build.build_and_measure`), or, with
    --if-missing, the measurement kept beside them where it covers every range of --rows."""
    import torch

    from ..engine.compiled import row_range
    from ..engine.graph_build import build_and_measure, kept_measurement
    from ..engine.graph_cache import artifact_dir, measurement_path, write_json
    from ..engine.load import load_engine

    if args.tokens < 1 or args.repeats < 1 or not args.rows or min(args.rows) < 1:
        raise SpecrejError("--rows, --tokens and --repeats must be 1 or more")
    if args.out:
        _refuse_overwriting_other_than_a_measurement(args.out)
    engine = load_engine(args.model, dtype=args.dtype, device=args.device, revision=args.model_revision, compile="off")
    print(f"specrej compile: {args.model}, {str(engine.dtype).removeprefix('torch.')} on {engine.device}, "
          f"{engine.forward_kind} forward pass", flush=True)
    if engine.forward_kind != "llama":
        raise SpecrejError(f"{args.model} runs through the fallback forward pass, which does not compile")
    measured = kept_measurement(engine.forward, torch.get_num_threads()) if args.if_missing else None
    if measured is not None and {row_range(rows) for rows in args.rows} <= set(measured["ranges"]):
        print(f"found this machine's graphs and their measurement of {measured['measured_at']}: not rebuilt")
    else:
        measured = build_and_measure(engine, tuple(args.rows), args.tokens, args.repeats,
                                     progress=lambda line: print(line, flush=True))
    faster = [name for name, m in measured["ranges"].items() if m["compiled_s"] < m["eager_s"]]
    where = measurement_path(artifact_dir(engine.forward), measured["threads"])
    print(f"kept in {where}; --compile auto at {measured['threads']} threads runs compiled on "
          + (", ".join(f"{name} rows" for name in faster) if faster else "no row range (eager everywhere)"))
    if args.out:
        write_json(Path(args.out), {**measured, "model": args.model, "kept_in": str(where), "compiled_ranges": faster})


def calibrate(args: argparse.Namespace) -> None:
    """`specrej calibrate`: this machine's step costs for MODEL as the runs use it
    (`engine.calibration.measure`), kept beside its compiled graphs (the generator's tables once,
    each reward's scoring beside them) and, with --out, copied there; with --if-missing what is
    kept from this CPU for the same run is used, and only what is missing measured."""
    import torch

    from ..engine.calibration import SAMPLER_VARIANTS, calibration_path, cpu_name, measure, measure_score
    from ..records.step_profile import read_calibration
    from ..engine.graph_cache import write_json
    from ..engine.load import load_engine
    from ..rewards.reward import load_reward

    if args.steps < 1 or args.repeats < 1 or not args.rows or min(args.rows) < 1 or min(args.contexts) < 2:
        raise SpecrejError("--rows, --steps and --repeats must be 1 or more, --contexts 2 or more")
    if args.min_seconds < 0:
        raise SpecrejError("--min-seconds must be 0 or more")
    samplers = list(SAMPLER_VARIANTS) if args.samplers is None else list(dict.fromkeys(args.samplers))
    unknown = [name for name in samplers if name not in SAMPLER_VARIANTS]
    if unknown or not samplers:
        raise SpecrejError(f"--samplers: {', '.join(map(repr, unknown)) or 'none given'}; the variants are "
                           f"{', '.join(SAMPLER_VARIANTS)}")
    if args.out:
        _refuse_overwriting_other_than(args.out, "kind", "a specrej calibration")
    if args.roofline:
        _roofline(args)
        return
    engine = load_engine(args.model, dtype=args.dtype, device=args.device, revision=args.model_revision,
                         compile=args.compile)
    reward = load_reward(args.reward, dtype=args.dtype, device=args.device) if args.reward else None
    run = {"model": args.model, "dtype": str(engine.dtype).removeprefix("torch."), "device": str(engine.device),
           "threads": torch.get_num_threads(), "compile": args.compile, "compiled": engine.compiled,
           "compiled_ranges": sorted(engine.forward.ranges) if engine.compiled else [],
           "grid": {"rows": sorted(set(args.rows)), "contexts": sorted(set(args.contexts)), "steps": args.steps,
                    "min_seconds": args.min_seconds, "repeats": args.repeats, "samplers": samplers}}
    where = calibration_path(engine.forward, run["threads"], args.compile)
    print(f"specrej calibrate: {args.model}, {run['dtype']} on {engine.device}, {run['threads']} thread(s), "
          f"{'compiled on ' + ', '.join(run['compiled_ranges']) + ' rows' if engine.compiled else 'eager'}", flush=True)
    kept = read_calibration(where) if args.if_missing else None
    progress = lambda line: print(line, flush=True)  # noqa: E731
    if kept is not None and kept.get("cpu") == cpu_name() and kept.get("run") == run:
        print(f"found this machine's calibration of {kept['measured_at']}: not measured again")
        calibration = kept
    else:
        started = time.perf_counter()
        calibration = {"kind": "measured", "cpu": cpu_name(), "run": run, "condition": args.condition,
                       **measure(engine, rows=args.rows, contexts=args.contexts, steps=args.steps,
                                 repeats=args.repeats, min_seconds=args.min_seconds, samplers=samplers,
                                 progress=progress),
                       "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "measure_s": round(time.perf_counter() - started, 1), "scores": {}}
    if reward is not None and args.reward not in calibration["scores"]:
        calibration["scores"][args.reward] = measure_score(engine, reward, repeats=args.repeats, progress=progress)
    write_json(where, calibration)
    print(f"kept in {where}; largest spread between repeats {100 * calibration['largest_spread']:.1f}%")
    if args.out:
        score = calibration["scores"].get(args.reward) if args.reward else None
        write_json(Path(args.out), {**{k: v for k, v in calibration.items() if k != "scores"},
                                    "run": {**run, "reward": args.reward}, "score": score, "kept_in": str(where)})


def _roofline(args: argparse.Namespace) -> None:
    """`specrej calibrate --roofline PEAK,BANDWIDTH --out FILE`: an estimated calibration of MODEL's
    steps from a device's data sheet (`step_profile.roofline_calibration`), nothing measured."""
    from transformers import AutoConfig

    from ..models.loading import resolve_model_path
    from ..records.flops import ModelShape
    from ..records.step_profile import roofline_calibration

    try:
        peak, bandwidth = (float(x) for x in args.roofline.split(","))
    except ValueError:
        raise SpecrejError(f"--roofline takes PEAK_FLOPS,BANDWIDTH (e.g. 989e12,3.35e12), got {args.roofline!r}") from None
    if not args.out or peak <= 0 or bandwidth <= 0:
        raise SpecrejError("--roofline needs positive numbers and --out FILE")
    shape = ModelShape.from_config(AutoConfig.from_pretrained(resolve_model_path(args.model), revision=args.model_revision))
    bytes_per_value = 4.0 if args.dtype == "float32" else 2.0
    calibration = roofline_calibration(peak, bandwidth, shape, bytes_per_value=bytes_per_value,
                                       name=f"roofline {args.roofline}")
    calibration["run"] = {"model": args.model, "dtype": args.dtype}
    Path(args.out).write_text(json.dumps(calibration, indent=1) + "\n", encoding="utf-8")
    print(f"specrej calibrate: {calibration['condition']} for {args.model}, written to {args.out}")


def _refuse_overwriting_other_than(path: str, key: str, what: str) -> None:
    """An --out that replaces only an earlier file of its own kind (a JSON object with `key`)."""
    try:
        kept = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        raise SpecrejError(f"--out {path}: exists and is not {what} ({error}); choose another path") from None
    if not (isinstance(kept, dict) and key in kept):
        raise SpecrejError(f"--out {path}: exists and is not {what}; choose another path")


def _refuse_overwriting_other_than_a_measurement(path: str) -> None:
    """`specrej compile --out` replaces only an earlier measurement of its own (a JSON object with "ranges")."""
    _refuse_overwriting_other_than(path, "ranges", "a specrej compile measurement")
