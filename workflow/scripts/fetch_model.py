"""`specrej fetch-model` for one model (rule fetch_model), then the marker that the jobs loading
the model wait for: {"spec": ..., "path": ...}, where `path` is the prepared directory (or the
hub id, whose files are then in the Hugging Face cache)."""

import json
import os
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (snakemake is injected)
from engine_call import call_specrej, log_to  # noqa: E402

log_to(snakemake.log[0])  # noqa: F821
spec = snakemake.params.spec  # noqa: F821
code = call_specrej(["fetch-model", spec], gpus=0)
if code == 0:
    from specrej.models.loading import resolve_model_path

    marker = snakemake.output[0]  # noqa: F821
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w", encoding="utf-8") as handle:
        json.dump({"spec": spec, "path": resolve_model_path(spec)}, handle)
        handle.write("\n")
sys.exit(code)
