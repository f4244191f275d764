# Prompts in (local file or Hugging Face dataset) and one small file per chunk of prompts.


rule prepare_prompts:
    input:
        [local_source(config["prompts"]["source"])] if local_source(config["prompts"]["source"]) else [],
    output:
        f"{RESULTS}/prompts/prompts.jsonl",
    params:
        source=local_source(config["prompts"]["source"]) or config["prompts"]["source"],
        select=prepared_select(config),  # the study's prompts, then adaptive SR's held-out ones
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
