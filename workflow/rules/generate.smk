# Prompts in (local file or Hugging Face dataset), one small file per chunk, and the full
# generations of the correlation study (Best-of-N runs whose every candidate is complete).

CORRELATION_SEED_OFFSET = 10_000  # independent of the Best-of-N shards (seed + k)


rule prepare_prompts:
    input:
        [local_source(config["prompts"]["source"])] if local_source(config["prompts"]["source"]) else [],
    output:
        f"{RESULTS}/prompts/prompts.jsonl",
    params:
        source=local_source(config["prompts"]["source"]) or config["prompts"]["source"],
        select=config["prompts"]["select"],
        split=config["prompts"]["split"],
        revision=config["prompts"]["revision"],
    log:
        f"{RESULTS}/logs/prepare_prompts.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_prompts.tsv"
    threads: 1
    resources:
        gpu=0,
        mem_mb=res("analysis", "mem_mb"),
        runtime=res("analysis", "runtime"),
    script:
        "../scripts/prepare_prompts.py"


rule prompt_chunk:
    input:
        # ancient: re-preparing the prompt set does not rerun generations; a changed prompt
        # changes params.prompts (its digest) and reruns exactly its chunk
        ancient(f"{RESULTS}/prompts/prompts.jsonl"),
    output:
        f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
    params:
        prompts=lambda wildcards: chunk_params(wildcards.chunk),
    log:
        f"{RESULTS}/logs/prompt_chunk/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prompt_chunk/{{chunk}}.tsv"
    threads: 1
    resources:
        gpu=0,
        mem_mb=res("analysis", "mem_mb"),
        runtime=res("analysis", "runtime"),
    script:
        "../scripts/prompt_chunk.py"


rule generate_correlation:
    """Full generations for the correlation study: correlation.n complete responses per prompt."""
    input:
        prompts=f"{RESULTS}/prompts/chunks/{{chunk}}.jsonl",
    output:
        f"{RESULTS}/runs/{{pair}}/correlation/{{chunk}}.jsonl",
    params:
        **generation_params("bon", n=config["correlation"]["n"], seed_offset=CORRELATION_SEED_OFFSET),
    log:
        f"{RESULTS}/logs/generate_correlation/{{pair}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate_correlation/{{pair}}/{{chunk}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        gpu=lambda wildcards: needs_gpu(wildcards.pair, "generate"),
        mem_mb=res("generate", "mem_mb"),
        runtime=res("generate", "runtime"),
    shell:
        GENERATE_SHELL


rule merge_correlation:
    input:
        lambda wildcards: expand(f"{RESULTS}/runs/{{pair}}/correlation/{{chunk}}.jsonl", pair=wildcards.pair,
                                 chunk=CHUNKS),
    output:
        f"{RESULTS}/runs/{{pair}}/correlation.jsonl",
    params:
        shards=1,
    log:
        f"{RESULTS}/logs/merge_correlation/{{pair}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_correlation/{{pair}}.tsv"
    threads: 1
    resources:
        gpu=0,
        mem_mb=res("analysis", "mem_mb"),
        runtime=res("analysis", "runtime"),
    script:
        "../scripts/merge_runs.py"
