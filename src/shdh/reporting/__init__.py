"""What a finished evaluation shows people: the results tables and the report (report), the paper's
figures (figures), the paper's published numbers (paper_results), the summary written onto the
pipeline's parent run (parent_summary) and the MLflow UI's saved comparison view (ui_view).

May import: core, hashers, nets, ranking, runtime, tracking, training.
"""
