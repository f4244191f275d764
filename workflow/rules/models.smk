# Every model the study loads, fetched and prepared once before the jobs that load it: the
# default model and .gguf files are converted into specrej's cache, a hub id is downloaded into
# the Hugging Face cache, a local directory is checked. Then no generation job fetches or converts.


rule fetch_model:
    """`specrej fetch-model` for one model; its output marks it ready (and says where it is)."""
    output:
        f"{RESULTS}/models/{{model}}.json",
    params:
        spec=lambda wildcards: MODELS[wildcards.model],
    log:
        f"{RESULTS}/logs/fetch_model/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/fetch_model/{{model}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/fetch_model.py"
