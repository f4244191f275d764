# Prompts in (local file or Hugging Face dataset) and one small file per chunk of prompts.


rule prepare_prompts:
    input:
        [PROMPT_FILE] if PROMPT_FILE else [],  # a local file; none for a Hugging Face dataset
    output:
        f"{RESULTS}/prompts/prompts.jsonl",
    params:
        # a Hugging Face dataset's name (None for a local file, the input: a changed path changes
        # the input files, which reruns the job as a changed dataset name does through params)
        dataset=None if PROMPT_FILE else config["prompts"]["source"],
        select=plan.prepared_select(config),  # the study's prompts, then adaptive SR's held-out ones
        split=config["prompts"]["split"],
        revision=config["prompts"]["revision"],
    log:
        f"{RESULTS}/logs/prepare_prompts.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_prompts.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
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
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/prompt_chunk.py"
