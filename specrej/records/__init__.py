"""The trajectory record and what is made of it, torch-free (analysis imports it): prompt files
in and JSON Lines out, appended atomically and resumed by settings digest (`io`); FLOPs from the
models' shapes (`flops`)."""
