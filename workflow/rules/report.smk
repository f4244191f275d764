# Tables 1-2 and Figures 2-4 at stable paths, each marked for `snakemake --report`.


rule table1:
    input:
        win_rates=f"{RESULTS}/evaluation/win_rates.csv",
        failed=f"{RESULTS}/failed_prompts.csv",
    output:
        csv=report(f"{RESULTS}/tables/table1.csv", caption="../report/table1.rst", category="Tables",
                   labels={"table": "Table 1"}),
        md=f"{RESULTS}/tables/table1.md",
        tex=f"{RESULTS}/tables/table1.tex",
        inputs=f"{RESULTS}/tables/table1_inputs.csv",
    params:
        pairs=[pair_labels(p)["pair"] for p in TABLE1_PAIRS],
    log:
        f"{RESULTS}/logs/table1.log",
    benchmark:
        f"{RESULTS}/benchmarks/table1.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/table1.py"


rule table2:
    input:
        summary=f"{RESULTS}/metrics/summary.csv",
        failed=f"{RESULTS}/failed_prompts.csv",
    output:
        csv=report(f"{RESULTS}/tables/table2.csv", caption="../report/table2.rst", category="Tables",
                   labels={"table": "Table 2"}),
        md=f"{RESULTS}/tables/table2.md",
        tex=f"{RESULTS}/tables/table2.tex",
    params:
        pairs=[pair_labels(p)["pair"] for p in TABLE2_PAIRS],
        reward=config["tables"]["table2_reward"],
    log:
        f"{RESULTS}/logs/table2.log",
    benchmark:
        f"{RESULTS}/benchmarks/table2.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/table2.py"


rule figure2:
    input:
        prefixes=f"{RESULTS}/correlation/{FIGURE2_PAIR}/prefixes.parquet",
        statistics=f"{RESULTS}/correlation/{FIGURE2_PAIR}/prompt_tau.csv",
    output:
        png=report(f"{RESULTS}/figures/figure2.png", caption="../report/figure2.rst", category="Figures",
                   labels={"figure": "Figure 2"}),
        pdf=f"{RESULTS}/figures/figure2.pdf",
    params:
        prompt=config["figures"]["figure2"]["prompt"],
        tau=config["figures"]["figure2"]["tau"],
        pair=pair_labels(FIGURE2_PAIR)["pair"],
    log:
        f"{RESULTS}/logs/figure2.log",
    benchmark:
        f"{RESULTS}/benchmarks/figure2.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/figure2.py"


rule figure3:
    input:
        f"{RESULTS}/metrics/summary.csv",
    output:
        png=report(f"{RESULTS}/figures/figure3.png", caption="../report/figure3.rst", category="Figures",
                   labels={"figure": "Figure 3"}),
        pdf=f"{RESULTS}/figures/figure3.pdf",
    params:
        compute=config["figures"]["figure3"]["compute"],
    log:
        f"{RESULTS}/logs/figure3.log",
    benchmark:
        f"{RESULTS}/benchmarks/figure3.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/figure3.py"


rule figure4:
    """Every pair of figures.figure4.pair, else of the correlation study: one row of panels each."""
    input:
        [f"{RESULTS}/correlation/{pair}/prompt_tau.csv" for pair in FIGURE4_PAIRS],
    output:
        png=report(f"{RESULTS}/figures/figure4.png", caption="../report/figure4.rst", category="Figures",
                   labels={"figure": "Figure 4"}),
        pdf=f"{RESULTS}/figures/figure4.pdf",
    params:
        pairs=[pair_labels(pair)["pair"] for pair in FIGURE4_PAIRS],  # in the order of the inputs
    log:
        f"{RESULTS}/logs/figure4.log",
    benchmark:
        f"{RESULTS}/benchmarks/figure4.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/figure4.py"


rule headline:
    """results/summary.md, one page: per pair the best SR setting's speedup at equal score, one
    table of every setting, the tokens saved beside the correlation study's oracle, the notes once,
    and adaptive SR against fixed α (analysis.headline, analysis.summary_page); every setting in
    full in results/tables/headline.md; the numbers in results/metrics/headline.csv and
    results/metrics/adaptive.csv. The report's first page, results/report_front.rst: the
    description, Figure 3 (embedded) and the headline in RST."""
    input:
        summary=f"{RESULTS}/metrics/summary.csv",
        bon_equivalent=f"{RESULTS}/metrics/bon_equivalent.csv",
        runs=f"{RESULTS}/metrics/runs.csv",
        failed=f"{RESULTS}/failed_prompts.csv",
        correlation=f"{RESULTS}/correlation/summary.csv",
        description=f"{workflow.basedir}/workflow/report/workflow.rst",
        figure3=f"{RESULTS}/figures/figure3.png",
        survival=adaptive_outputs("survival.csv", CORRELATION_PAIRS),
        fits=adaptive_outputs("fits.csv", PAIRS),
        accuracy=accuracy_metrics("accuracy.csv"),  # the accuracy study's section (answers.smk), if any
        accuracy_ladder=accuracy_metrics("accuracy_ladder.csv"),
        calibrations=calibration_files(),  # modelled compute: what it was costed on, and the check
        compute_check=f"{RESULTS}/metrics/compute_check.csv",
    output:
        markdown=report(
            f"{RESULTS}/summary.md",
            caption="../report/headline.rst",
            category="1. Headline",
            labels={"table": "headline"},
        ),
        csv=f"{RESULTS}/metrics/headline.csv",
        adaptive=f"{RESULTS}/metrics/adaptive.csv",
        front=f"{RESULTS}/report_front.rst",
        details=f"{RESULTS}/tables/headline.md",
    params:
        # the measure of relative_compute: modelled, else the measured work (wall and flops have columns of their own)
        compute="modelled" if config["figures"]["figure3"]["compute"] == "modelled" else "work",
        improvement_normalization=config["tables"]["improvement_normalization"],
        bootstrap_resamples=config["tables"]["bootstrap_resamples"],
        confidence_level=config["tables"]["confidence_level"],
        bootstrap_seed=config["tables"]["bootstrap_seed"],
        correlation_resamples=config["correlation"]["n_resamples"],
        pair_of={path: pair_labels(Path(path).parts[-2])["pair"]
                 for path in adaptive_outputs("survival.csv", CORRELATION_PAIRS) + adaptive_outputs("fits.csv", PAIRS)},
    log:
        f"{RESULTS}/logs/headline.log",
    benchmark:
        f"{RESULTS}/benchmarks/headline.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/headline.py"


rule decisions:
    """Each method setting's decisions over prompts (analysis.decisions): rounds, the first
    decision token, and what each method recorded of its decision (ST-BoN: c, tau, c + tau)."""
    input:
        runs=merged_runs(),
    output:
        csv=report(f"{RESULTS}/tables/decisions.csv", caption="../report/decisions.rst", category="Tables",
                   labels={"table": "decisions"}),
        md=f"{RESULTS}/tables/decisions.md",
    params:
        pair_of=lambda wildcards, input: {path: pair_labels(run_pair(path))["pair"] for path in input.runs},
    log:
        f"{RESULTS}/logs/decisions.log",
    benchmark:
        f"{RESULTS}/benchmarks/decisions.tsv"
    resources:
        **ANALYSIS_RESOURCES,
    conda:
        "../envs/specrej.yaml"
    script:
        "../scripts/decisions_table.py"
