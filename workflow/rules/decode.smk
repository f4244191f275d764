# Best-of-N and Speculative Rejection, one job per (pair, chunk of prompts) and per shard,
# alpha or adaptive delta, then one merged run file per method: results/runs/<pair>/bon/n<N>.jsonl,
# results/runs/<pair>/sr/alpha<A>.jsonl and results/runs/<pair>/sr/delta<D>.jsonl. Every generation
# job runs scripts/generate.py: `specrej generate` with its params.args (plan.generate_args).


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


rule sr:
    """Speculative Rejection at one alpha."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
        models=pair_model_files,
    output:
        f"{RESULTS}/runs/{{pair}}/sr/alpha{{alpha}}/{{chunk}}.jsonl",
    params:
        **generation_params("sr", alpha=lambda wildcards: float(wildcards.alpha),
                            decision_tokens=config["sr"]["decision_tokens"]),
    log:
        f"{RESULTS}/logs/sr/{{pair}}/alpha{{alpha}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sr/{{pair}}/alpha{{alpha}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        **step_resources("generate"),
    script:
        "../scripts/generate.py"


rule sr_adaptive:
    """Speculative Rejection with the adaptive rule at one delta (specrej/adaptive.py, paper §6),
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


rule merge_sr:
    """One SR run file per alpha (alpha<A>) or adaptive delta (delta<D>)."""
    input:
        lambda wildcards: expand(f"{RESULTS}/runs/{{pair}}/sr/{{setting}}/{{chunk}}.jsonl", pair=wildcards.pair,
                                 setting=wildcards.setting, chunk=CHUNKS),
    output:
        f"{RESULTS}/runs/{{pair}}/sr/{{setting}}.jsonl",
    params:
        shards=1,
    log:
        f"{RESULTS}/logs/merge_sr/{{pair}}/{{setting}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_sr/{{pair}}/{{setting}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    script:
        "../scripts/merge_runs.py"
