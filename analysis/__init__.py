"""Analysis of specrej outputs: pure functions, pandas in → DataFrame / Figure out.

Modules (each documents the columns it consumes and produces):

- ``settings``            — the configuration key: a record's (method, setting, label), how
                            settings are ordered, named and told apart; standard library only.
- ``io``                  — read trajectory JSONL and prefix parquet into plain Python / pandas.
- ``correlation``         — how well partial rewards predict final rewards (paper §4, Figures 2 and 4).
- ``metrics``             — improvement score, relative compute and FLOPs, speedup, perplexity
                            (paper §5, Figure 3 and Table 2), for every method.
- ``bon_curve``           — where each configuration lands on the Best-of-N curve: BoN-equivalent
                            compute and the speedup at equal score.
- ``adaptive_study``      — adaptive rejection against fixed α (paper §6).
- ``figures``             — Figures 2–4 as matplotlib Figures, plus ``save_figure``.
- ``tables``              — Tables 1–2 as DataFrames, written as CSV, Markdown and LaTeX.
- ``headline``            — the study's headline, ``results/summary.md``; ``summary_page`` lays it
                            out, ``summary_format`` writes its numbers and cells.
- ``winrate``             — win-rates vs Bo-N_min for Table 1 (``table1_from_files``).
- ``judge_registry``      — the judges by name (``gpt4_turbo``, ``local:<model>``, ``longest``,
                            ``auto``) and how ``auto`` resolves; standard library only.
- ``alpaca_eval_adapter`` — alpaca_eval run offline with a judge (annotator configs in ``judges/``);
                            the only module that imports alpaca_eval.

Nothing here imports torch (only the torch-free ``specrej.methods.cuts``): the analysis runs on
any machine that has the JSONL / parquet files.
"""
