# Best-of-N, Speculative Rejection and every other method, one job per (pair, chunk of prompts)
# and per shard, setting or adaptive delta, then one merged run file per setting:
# results/runs/<pair>/bon/n<N>.jsonl (the reference ladder), results/runs/<pair>/<method>/<setting>.jsonl
# (SR's alphas: sr/alpha<A>; the `methods:` entries) and results/runs/<pair>/sr/delta<D>.jsonl
# (adaptive SR, with its held-out fit). Every generation job runs scripts/generate.py: `specrej
# generate` with its params.args (plan.generate_args, plan.method_args).


rule bon_shard:
    """One shard of bon.shard_size responses with its own seed (seed + k): the paper's one GPU job."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=pair_model_files,
    output:
        f"{RESULTS}/runs/{{pair}}/bon/shard{{k}}/{{chunk}}.jsonl",
    params:
        **generation_params("bon", n=config["bon"]["shard_size"], seed_offset=lambda wildcards: int(wildcards.k)),
    log:
        f"{RESULTS}/logs/bon_shard/{{pair}}/shard{{k}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/bon_shard/{{pair}}/shard{{k}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    script:
        "../scripts/generate.py"


rule bon_direct:
    """Best-of-N below one shard (or without shards): one run of N responses."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=pair_model_files,
    output:
        f"{RESULTS}/runs/{{pair}}/bon/n{{n}}/{{chunk}}.jsonl",
    params:
        **generation_params("bon", n=lambda wildcards: int(wildcards.n)),
    log:
        f"{RESULTS}/logs/bon_direct/{{pair}}/n{{n}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/bon_direct/{{pair}}/n{{n}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    script:
        "../scripts/generate.py"


rule merge_bon:
    """Bo-N: the best of shards 0..N/shard_size-1 for every prompt (or the direct run's records)."""
    input:
        bon_chunk_inputs,
    output:
        f"{RESULTS}/runs/{{pair}}/bon/n{{n}}.jsonl",
    params:
        shards=bon_shards,
    log:
        f"{RESULTS}/logs/merge_bon/{{pair}}/n{{n}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_bon/{{pair}}/n{{n}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    script:
        "../scripts/merge_runs.py"


rule method_run:
    """One setting of a method on one chunk of prompts: SR at an alpha (sr.alphas), or a setting
    of a `methods:` entry (the random-halting control, a method from outside the project ...).
    One rule serves every method, so adding one needs no rule and no profile edit."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=pair_model_files,
    output:
        f"{RESULTS}/runs/{{pair}}/{{method}}/{{setting}}/{{chunk}}.jsonl",
    wildcard_constraints:
        method=METHOD_DIRS,
        setting=METHOD_SETTINGS,
    params:
        args=lambda wildcards: method_run_args(wildcards),
        partial=lambda wildcards, output: plan.partial_path(RESULTS, output[0], method_run_args(wildcards)),
        prompt_ids=lambda wildcards: chunk_params(wildcards.chunk),
    log:
        f"{RESULTS}/logs/method_run/{{pair}}/{{method}}/{{setting}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/method_run/{{pair}}/{{method}}/{{setting}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    script:
        "../scripts/generate.py"


rule merge_method:
    """One run file per method setting: its chunks, in order."""
    input:
        lambda wildcards: expand(f"{RESULTS}/runs/{{pair}}/{{method}}/{{setting}}/{{chunk}}.jsonl",
                                 pair=wildcards.pair, method=wildcards.method, setting=wildcards.setting,
                                 chunk=CHUNKS),
    output:
        f"{RESULTS}/runs/{{pair}}/{{method}}/{{setting}}.jsonl",
    wildcard_constraints:
        method=METHOD_DIRS,
        setting=METHOD_SETTINGS,
    params:
        shards=1,
    log:
        f"{RESULTS}/logs/merge_method/{{pair}}/{{method}}/{{setting}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_method/{{pair}}/{{method}}/{{setting}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    script:
        "../scripts/merge_runs.py"


rule sr_adaptive:
    """Speculative Rejection with the adaptive rule at one delta (specrej/methods/adaptive_cut.py, paper §6),
    its partial/final fit from the held-out prompts (or online, without them)."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=pair_model_files,
        fit=lambda wildcards: calibration_fit(wildcards.pair),
    output:
        f"{RESULTS}/runs/{{pair}}/sr/delta{{delta}}/{{chunk}}.jsonl",
    params:
        **generation_params("sr", alpha=config["sr"]["adaptive"]["fallback_alpha"],
                            decision_tokens=config["sr"]["decision_tokens"],
                            delta=lambda wildcards: float(wildcards.delta),
                            fit=lambda wildcards: (calibration_fit(wildcards.pair) or [None])[0]),
    log:
        f"{RESULTS}/logs/sr_adaptive/{{pair}}/delta{{delta}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sr_adaptive/{{pair}}/delta{{delta}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    script:
        "../scripts/generate.py"


rule merge_sr_adaptive:
    """One adaptive SR run file per delta."""
    input:
        lambda wildcards: expand(f"{RESULTS}/runs/{{pair}}/sr/delta{{delta}}/{{chunk}}.jsonl", pair=wildcards.pair,
                                 delta=wildcards.delta, chunk=CHUNKS),
    output:
        f"{RESULTS}/runs/{{pair}}/sr/delta{{delta}}.jsonl",
    params:
        shards=1,
    log:
        f"{RESULTS}/logs/merge_sr_adaptive/{{pair}}/delta{{delta}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_sr_adaptive/{{pair}}/delta{{delta}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    script:
        "../scripts/merge_runs.py"
