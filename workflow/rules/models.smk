# Every model the study loads, fetched and prepared once before the jobs that load it: the
# default model and .gguf files are converted into specrej's cache, a hub id is downloaded into
# the Hugging Face cache, a local directory is checked. Then no generation job fetches or converts.
# A generator under compile auto has its compiled graphs built and measured here too (compiled_graphs),
# and each pair's step costs measured once per machine (calibrate: eq. 7's modelled compute).


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


rule compiled_graphs:
    """`specrej compile --if-missing --rows ROWS` for one model and dtype of a generator under compile
    auto (job_options.builds_graphs), one job per row range of the compiled step (job_options.GRAPH_ROWS):
    the range's graphs built and measured against eager once on this machine, before the generation
    jobs that run on it, which then run compiled there where that measurement says it is faster; its
    output keeps the measurement. Best-of-N's jobs wait on the small ranges' only, so the largest is
    built beside them. A later study finds the graphs and re-times nothing."""
    input:
        lambda wildcards: ancient(
            f"{RESULTS}/models/{plan.model_name(config['generators'][graphs_generator(wildcards)]['model'])}.json"),
    output:
        f"{RESULTS}/graphs/{{graphs}}/rows-{{rows}}.json",
    wildcard_constraints:
        rows="|".join(map(str, job_options.GRAPH_ROWS.values())),
    params:
        args=lambda wildcards: job_options.compile_args(config, graphs_generator(wildcards), int(wildcards.rows)),
    log:
        f"{RESULTS}/logs/compiled_graphs/{{graphs}}/rows-{{rows}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/compiled_graphs/{{graphs}}/rows-{{rows}}.tsv"
    threads: config["resources"]["generate"]["threads"]
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/compiled_graphs.py"


rule calibrate:
    """`specrej calibrate --if-missing` for one pair (figures.figure3.compute: modelled): this machine's
    step costs for its generator as the generation jobs run it (after its compiled graphs) and its
    reward's scoring, measured once per machine and kept beside the graphs; the copy here names the
    CPU and the date. The job holds every local core, so the calibration is taken alone (its reference
    condition); the analysis costs each record's steps on it."""
    input:
        lambda wildcards: pair_model_files(wildcards),
    output:
        f"{RESULTS}/calibration/{{pair}}.json",
    params:
        args=lambda wildcards: job_options.calibrate_args(config, PAIRS[wildcards.pair]),
        engine_threads=config["resources"]["generate"]["threads"],
    log:
        f"{RESULTS}/logs/calibrate/{{pair}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/calibrate/{{pair}}.tsv"
    threads: all_local_cores()
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/calibrate.py"
