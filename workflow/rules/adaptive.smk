# Adaptive rejection (paper §6, specrej/methods/adaptive_cut.py): the partial/final fit from held-out prompts
# (the entry's calibration_prompts: their Best-of-N shards scored at the correlation study's
# decision tokens), and the best response's survival against fixed α at equal tokens on the
# correlation study's responses. The adaptive SR runs themselves are method_run jobs (decode.smk).


rule calibration_fit:
    """The held-out prompts' prefix tables pooled, and the fit per decision token."""
    input:
        lambda wildcards: expand(f"{RESULTS}/adaptive/{{pair}}/prefixes/{{chunk}}.parquet", pair=wildcards.pair,
                                 chunk=CALIBRATION_CHUNKS),
    output:
        prefixes=f"{RESULTS}/adaptive/{{pair}}/calibration_prefixes.parquet",
        fits=f"{RESULTS}/adaptive/{{pair}}/fits.csv",
    log:
        f"{RESULTS}/logs/calibration_fit/{{pair}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/calibration_fit/{{pair}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/calibration_fit.py"


rule adaptive_survival:
    """Per decision token and delta: how often the adaptive rule keeps the response that ends best,
    against the fixed α that keeps as many rows (analysis.adaptive_study)."""
    input:
        prefixes=f"{RESULTS}/correlation/{{pair}}/prefixes.parquet",
        calibration=f"{RESULTS}/adaptive/{{pair}}/calibration_prefixes.parquet",
    output:
        f"{RESULTS}/adaptive/{{pair}}/survival.csv",
    params:
        deltas=ADAPTIVE_DELTAS,
        n_resamples=config["tables"]["bootstrap_resamples"],
        confidence_level=config["tables"]["confidence_level"],
        seed=config["tables"]["bootstrap_seed"],
    log:
        f"{RESULTS}/logs/adaptive_survival/{{pair}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/adaptive_survival/{{pair}}.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/adaptive_survival.py"
