# The accuracy study (issue 50): problems with reference answers, a quality axis no method selects
# on. The prompts come from a seeded reasoning-gym generator (`prompts.source: reasoning-gym`, rule
# problem_set, whose file prepare_prompts reads as any prompts file) or from a file whose lines
# carry `answer`; every completed candidate then carries its answer and whether it is right. Per
# configuration and selection rule (the reward's pick, majority vote, weighted vote) the accuracy at
# its compute, the SC@k / BoN@k ladder from Best-of-N's pooled shards, and how well the partial
# reward at each decision token predicts a correct ending (analysis.accuracy). Active only when the
# study's prompts have answers (PLAN.answers, PLAN.problem_set).


if PROBLEM_SET:

    rule problem_set:
        """The problem set of `prompts.problems` as a prompts file (answers_plan.problem_set_lines), one line per
        problem with its answer, extract, check, entry and the set's digest."""
        output:
            f"{RESULTS}/prompts/problems.jsonl",
        params:
            problems=config["prompts"]["problems"],
            # the set's digest at planning time: another reasoning-gym that draws other problems reruns it
            digest=PROBLEM_SET,
        log:
            f"{RESULTS}/logs/problem_set.log",
        benchmark:
            f"{RESULTS}/benchmarks/problem_set.tsv"
        resources:
            **ANALYSIS_RESOURCES,
        conda:
            "../envs/specrej.yaml"
        script:
            "../scripts/problem_set.py"


if ANSWERS:

    rule accuracy_table:
        """Accuracy per pair, configuration and selection rule with its compute (Best-of-N from its
        shards with every candidate, every other method from its merged run), and the SC@k / BoN@k /
        pass@k ladder from the largest Best-of-N's pool (analysis.accuracy)."""
        input:
            runs=merged_method_runs(),
            reference=reference_ladder_files(),
        output:
            summary=f"{RESULTS}/metrics/accuracy.csv",
            ladder=f"{RESULTS}/metrics/accuracy_ladder.csv",
            csv=report(f"{RESULTS}/tables/accuracy.csv", caption="../report/accuracy.rst", category="Tables",
                       labels={"table": "accuracy"}),
            md=f"{RESULTS}/tables/accuracy.md",
            tex=f"{RESULTS}/tables/accuracy.tex",
        params:
            reference=lambda wildcards: {pair: reference_ladder(pair) for pair in PAIRS},
            meta=lambda wildcards: {pair: {"pair_key": pair, "pair": pair_labels(pair)["pair"]} for pair in PAIRS},
            run_pairs=lambda wildcards, input: {path: run_pair(path) for path in input.runs},
            reference_n=PLAN.reference["ladder"][0],  # Bo-N_min: compute is relative to it
            ks=answers_plan.ladder_ks(PLAN.reference["ladder"]),
            bootstrap_resamples=config["tables"]["bootstrap_resamples"],
            confidence_level=config["tables"]["confidence_level"],
            bootstrap_seed=config["tables"]["bootstrap_seed"],
        log:
            f"{RESULTS}/logs/accuracy_table.log",
        benchmark:
            f"{RESULTS}/benchmarks/accuracy_table.tsv"
        resources:
            **ANALYSIS_RESOURCES,
        conda:
            "../envs/specrej.yaml"
        script:
            "../scripts/accuracy_table.py"

    rule accuracy_figure:
        """Accuracy against relative compute: every configuration under every rule, and the ladder."""
        input:
            summary=f"{RESULTS}/metrics/accuracy.csv",
            ladder=f"{RESULTS}/metrics/accuracy_ladder.csv",
        output:
            png=report(f"{RESULTS}/figures/accuracy_vs_compute.png", caption="../report/accuracy_vs_compute.rst",
                       category="Figures", labels={"figure": "accuracy vs compute"}),
            pdf=f"{RESULTS}/figures/accuracy_vs_compute.pdf",
        params:
            compute=config["figures"]["figure3"]["compute"],  # flops: the FLOPs axis, as Figure 3's
            reference_n=PLAN.reference["ladder"][0],
        log:
            f"{RESULTS}/logs/accuracy_figure.log",
        benchmark:
            f"{RESULTS}/benchmarks/accuracy_figure.tsv"
        resources:
            **ANALYSIS_RESOURCES,
        conda:
            "../envs/specrej.yaml"
        script:
            "../scripts/accuracy_figure.py"

    rule correctness:
        """Per studied pair and decision token: how well the partial reward predicts that a candidate
        ends correct, on the correlation study's prefix table and the Best-of-N responses it scored."""
        input:
            prefixes=expand(f"{RESULTS}/correlation/{{pair}}/prefixes.parquet", pair=CORRELATION_PAIRS),
            trajectories=[path for pair in CORRELATION_PAIRS
                          for path in reference_pool(pair, config["correlation"]["n"])["files"]],
        output:
            report(f"{RESULTS}/correlation/correctness.csv", caption="../report/correctness.rst",
                   category="Correlation", labels={"table": "correctness prediction"}),
        params:
            # per pair, in the order of input.prefixes: its label and the files of the responses it scored
            pairs=lambda wildcards: [{"pair": pair_labels(pair)["pair"], **reference_pool(pair, config["correlation"]["n"])}
                                     for pair in CORRELATION_PAIRS],
            bootstrap_resamples=config["correlation"]["n_resamples"],
            confidence_level=config["correlation"]["confidence_level"],
            bootstrap_seed=config["tables"]["bootstrap_seed"],
        log:
            f"{RESULTS}/logs/correctness.log",
        benchmark:
            f"{RESULTS}/benchmarks/correctness.tsv"
        resources:
            **ANALYSIS_RESOURCES,
        conda:
            "../envs/specrej.yaml"
        script:
            "../scripts/correctness.py"
