# Do partial rewards predict final rewards? (paper §4) Prefix scores per chunk of prompts,
# statistics per (prompt, tau) per pair, and the bootstrap summary across prompts. The
# responses are Best-of-N's own (its first correlation.n / shard_size shards): one large
# run, subsampled, rather than a second generation of the same distribution.


rule score_prefixes:
    """`specrej score-prefixes` on one chunk's Best-of-N responses (free for the logprob reward):
    the study's chunks for the correlation study, the held-out ones for adaptive SR's fit."""
    input:
        trajectories=correlation_trajectories,
        models=pair_model_files,
    output:
        f"{RESULTS}/{{study}}/{{pair}}/prefixes/{{chunk}}.parquet",
    params:
        args=prefix_args,
    log:
        f"{RESULTS}/logs/score_prefixes/{{study}}/{{pair}}/{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score_prefixes/{{study}}/{{pair}}/{{chunk}}.tsv"
    threads: config["resources"]["score_prefixes"]["threads"]
    resources:
        **step_resources("score_prefixes"),
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/score_prefixes.py"


rule correlation_statistics:
    """One row per (prompt, tau): Pearson, Kendall, OLS, oracle cutoff, tokens saved, best survives."""
    input:
        lambda wildcards: expand(f"{RESULTS}/correlation/{{pair}}/prefixes/{{chunk}}.parquet",
                                 pair=wildcards.pair, chunk=CHUNKS),
    output:
        prefixes=f"{RESULTS}/correlation/{{pair}}/prefixes.parquet",
        statistics=f"{RESULTS}/correlation/{{pair}}/prompt_tau.csv",
    params:
        alphas=config["correlation"]["alphas"],
    log:
        f"{RESULTS}/logs/correlation_statistics/{{pair}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/correlation_statistics/{{pair}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/correlation_statistics.py"


rule correlation_summary:
    """Mean per tau across prompts with bootstrap confidence intervals, for every studied pair."""
    input:
        expand(f"{RESULTS}/correlation/{{pair}}/prompt_tau.csv", pair=CORRELATION_PAIRS),
    output:
        report(
            f"{RESULTS}/correlation/summary.csv",
            caption="../report/correlation_summary.rst",
            category="Correlation",
            labels={"table": "correlation summary"},
        ),
    params:
        pairs={pair: pair_labels(pair) for pair in CORRELATION_PAIRS},
        confidence_level=config["correlation"]["confidence_level"],
        n_resamples=config["correlation"]["n_resamples"],
    log:
        f"{RESULTS}/logs/correlation_summary.log",
    benchmark:
        f"{RESULTS}/benchmarks/correlation_summary.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/correlation_summary.py"
