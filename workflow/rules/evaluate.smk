# Metrics of the merged runs (paper §5): one row per answered prompt and run, the failed
# prompts, the per-configuration summary (improvement, relative compute, speedup), and the
# win-rates of Table 1 (analysis.winrate with `evaluation.judge`; "not evaluated" without one).


rule runs_table:
    """One row per (run, answered prompt) and one per failed prompt, with display labels."""
    input:
        runs=merged_runs(),
        calibrations=calibration_files(),
    output:
        runs=f"{RESULTS}/metrics/runs.csv",
        compute_check=f"{RESULTS}/metrics/compute_check.csv",
        failed=report(
            f"{RESULTS}/failed_prompts.csv",
            caption="../report/failed_prompts.rst",
            category="Failed prompts",
            labels={"table": "failed prompts"},
        ),
    params:
        meta=lambda wildcards, input: {
            path: {"pair_key": run_pair(path), **pair_labels(run_pair(path))}
            for path in input.runs
        },
        compute=config["figures"]["figure3"]["compute"],
    log:
        f"{RESULTS}/logs/runs_table.log",
    benchmark:
        f"{RESULTS}/benchmarks/runs_table.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/runs_table.py"


rule method_summary:
    """Per pair and configuration: improvement score, relative compute, speedup, perplexity."""
    input:
        f"{RESULTS}/metrics/runs.csv",
    output:
        summary=report(
            f"{RESULTS}/metrics/summary.csv",
            caption="../report/method_summary.rst",
            category="Metrics",
            labels={"table": "method summary"},
        ),
        bon_equivalent=f"{RESULTS}/metrics/bon_equivalent.csv",
    params:
        improvement_normalization=config["tables"]["improvement_normalization"],
        bootstrap_resamples=config["tables"]["bootstrap_resamples"],
        confidence_level=config["tables"]["confidence_level"],
        bootstrap_seed=config["tables"]["bootstrap_seed"],
    log:
        f"{RESULTS}/logs/method_summary.log",
    benchmark:
        f"{RESULTS}/benchmarks/method_summary.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/method_summary.py"


rule win_rates:
    """Win-rates against Bo-N_min for Table 1, judged by `evaluation.judge`. When no judge can
    run here (none configured, no OpenAI key, no alpaca_eval) every cell is written as
    "not evaluated" with the reason, so the table says so instead of going missing."""
    input:
        runs=merged_runs(TABLE1_PAIRS),
        judge_model=judge_model_files(),
    output:
        win_rates=f"{RESULTS}/evaluation/win_rates.csv",
        annotations=directory(f"{RESULTS}/evaluation/annotations"),
    params:
        judge=config["evaluation"]["judge"],
        # what the judge lacked, if anything: once it changes (alpaca_eval installed, a key set),
        # a "not evaluated" table is judged again
        judge_availability=plan.judge_availability(config),
        runs={pair_labels(pair)["generator"]: merged_runs([pair]) for pair in TABLE1_PAIRS},
    log:
        f"{RESULTS}/logs/win_rates.log",
    benchmark:
        f"{RESULTS}/benchmarks/win_rates.tsv"
    threads: judge_resource("threads")
    resources:
        gpu=judge_resource("gpu"),
        mem_mb=judge_resource("mem_mb"),
        runtime=judge_resource("runtime"),
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/win_rates.py"
