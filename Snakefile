# specrej: one command regenerates Tables 1-2, Figures 2-4 and the correlation summary (and, for
# problems with reference answers, the accuracy study).
#   snakemake --cores 2                                   # config/config.yaml: the CPU default
#   snakemake --configfile config/paper.yaml --profile profiles/slurm   # the paper's setting
#   snakemake --report results/report.html                # every figure and table, with captions
# The rules only wire files together: the engine is `specrej`, the analysis is `analysis/`, the
# plan's plain Python is workflow/plan.py, job_options.py and messages.py.

from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


# the default, found from any working directory; --configfile FILE is merged over it
configfile: f"{workflow.basedir}/config/config.yaml"


# the report's first page: the description followed by the study's headline once it exists
# (<results_dir>/report_front.rst, written by rule headline); before that, the description alone
FRONT_PAGE = Path(str(config.get("results_dir", "results")), "report_front.rst").resolve()


report: str(FRONT_PAGE) if FRONT_PAGE.exists() else "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


validate_config(config, "workflow/schemas/config.schema.yaml")
setup_plan(config)


include: "workflow/rules/models.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/correlation.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/adaptive.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/answers.smk"  # the accuracy study: only when the prompts have reference answers


localrules:
    all,
    prompt_chunk,
    fetch_model,  # a cluster's compute nodes often have no network; its login node has


rule all:
    default_target: True
    input:
        expand(f"{RESULTS}/tables/table{{i}}.{{ext}}", i=[1, 2], ext=["csv", "md", "tex"]),
        expand(f"{RESULTS}/tables/decisions.{{ext}}", ext=["csv", "md"]),
        expand(f"{RESULTS}/figures/figure{{i}}.{{ext}}", i=[2, 3, 4], ext=["png", "pdf"]),
        f"{RESULTS}/correlation/summary.csv",
        f"{RESULTS}/summary.md",
        f"{RESULTS}/failed_prompts.csv",
        merged_runs(),
        accuracy_outputs(),  # [] unless the prompts have reference answers


check_rule_settings()  # every rule is defined by now


onstart:
    # what the study runs and about how long it takes, before its first job; Snakemake calls it
    # once, in the main process, and not for a dry run, a report or a run with nothing to do
    report_start()


onsuccess:
    report_after_run()


onerror:
    report_failure()
