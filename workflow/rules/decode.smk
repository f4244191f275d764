# Every method of the `methods:` entries, one job per (pair, chunk of prompts) and per shard or
# setting, then one merged run file per setting: results/runs/<pair>/bon/n<N>.jsonl (the reference
# entry's ladder: Best-of-N) and results/runs/<pair>/<method>/<setting>.jsonl (e.g. sr/alpha0.5).
# Every generation job runs scripts/generate.py: `specrej generate` with its params.args
# (job_options.reference_args, job_options.method_args).


rule reference_shard:
    """One shard of the reference entry's shard_size responses with its own seed (seed + k): the paper's one GPU job."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=reference_model_files,
    output:
        f"{RESULTS}/runs/{{pair}}/{REFERENCE_DIR}/shard{{k}}/{{chunk}}.jsonl",
    params:
        **reference_params(n=lambda wildcards: PLAN.reference["shard_size"], seed_offset=lambda wildcards: int(wildcards.k)),
    log:
        f"{RESULTS}/logs/reference_shard/{{pair}}/shard{{k}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/reference_shard/{{pair}}/shard{{k}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/generate.py"


rule reference_direct:
    """Best-of-N below one shard (or without shards): one run of N responses."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=reference_model_files,
    output:
        f"{RESULTS}/runs/{{pair}}/{REFERENCE_DIR}/n{{n}}/{{chunk}}.jsonl",
    params:
        **reference_params(n=lambda wildcards: int(wildcards.n)),
    log:
        f"{RESULTS}/logs/reference_direct/{{pair}}/n{{n}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/reference_direct/{{pair}}/n{{n}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/generate.py"


rule merge_reference:
    """Bo-N: the best of shards 0..N/shard_size-1 for every prompt (or the direct run's records)."""
    input:
        reference_chunk_inputs,
    output:
        f"{RESULTS}/runs/{{pair}}/{REFERENCE_DIR}/n{{n}}.jsonl",
    params:
        shards=reference_shards,
    log:
        f"{RESULTS}/logs/merge_reference/{{pair}}/n{{n}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_reference/{{pair}}/n{{n}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/merge_runs.py"


rule method_run:
    """One setting of a `methods:` entry on one chunk of prompts (SR at an alpha, adaptive SR at a
    delta with its held-out fit, the random-halting control, a method from outside the project ...).
    One rule serves every method, so adding one needs no rule and no profile edit."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=pair_model_files,
        fit=method_run_fit,
        method_source=method_run_source,
    output:
        f"{RESULTS}/runs/{{pair}}/{{method}}/{{setting}}/{{chunk}}.jsonl",
    wildcard_constraints:
        method=METHOD_DIRS,
        setting=METHOD_SETTINGS,
    params:
        args=lambda wildcards: method_run_args(wildcards),
        # the method's code (module digest or specrej version): a changed method reruns, and its
        # partial file is another, so records of the old code are never resumed
        code=method_run_code,
        partial=lambda wildcards, output: job_options.partial_path(
            RESULTS, output[0], f"{method_run_args(wildcards)} {method_run_code(wildcards)}",
            chunk_params(wildcards.chunk)["digest"]),
        prompt_ids=lambda wildcards: chunk_params(wildcards.chunk),
    log:
        f"{RESULTS}/logs/method_run/{{pair}}/{{method}}/{{setting}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/method_run/{{pair}}/{{method}}/{{setting}}/{{chunk}}.tsv"
    # before the reference's shards where both can run: a method's job is most often longer than a
    # shard, and longest first leaves the shortest jobs to fill both cores at the study's end
    priority: 1
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    conda:
        "../envs/specrej.yaml"
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
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/merge_runs.py"
